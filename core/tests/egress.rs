//! The egress guard: address classification on both sides of every range boundary, the URL
//! check, configuration, the filtering resolver, and real requests to a local server that
//! must never see a connection when the guard refuses.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::{Method, Url};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracon_core::config::Config;
use tracon_core::egress::{EgressClient, EgressError, EgressPolicy, GuardedResolver, MAX_REDIRECTS, is_forbidden};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// Asserts each `(address, forbidden?)` pair, reporting every mismatch at once.
fn assert_classified(cases: &[(&str, bool)]) {
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(a, f)| is_forbidden(ip(a)) != *f)
        .map(|(a, f)| format!("{a}: expected {}", if *f { "forbidden" } else { "allowed" }))
        .collect();
    assert!(wrong.is_empty(), "misclassified: {wrong:#?}");
}

// --- is_forbidden --------------------------------------------------------------------------

#[test]
fn ipv4_ranges_are_forbidden_on_both_sides_of_each_boundary() {
    assert_classified(&[
        // 0.0.0.0/8
        ("0.0.0.0", true),
        ("0.255.255.255", true),
        ("1.0.0.0", false),
        // 10.0.0.0/8
        ("9.255.255.255", false),
        ("10.0.0.0", true),
        ("10.1.2.3", true),
        ("10.255.255.255", true),
        ("11.0.0.0", false),
        // 100.64.0.0/10 (carrier-grade NAT)
        ("100.63.255.255", false),
        ("100.64.0.0", true),
        ("100.127.255.255", true),
        ("100.128.0.0", false),
        // 127.0.0.0/8
        ("126.255.255.255", false),
        ("127.0.0.0", true),
        ("127.0.0.1", true),
        ("127.255.255.255", true),
        ("128.0.0.0", false),
        // 169.254.0.0/16, with the cloud metadata address
        ("169.253.255.255", false),
        ("169.254.0.0", true),
        ("169.254.169.254", true),
        ("169.254.255.255", true),
        ("169.255.0.0", false),
        // 172.16.0.0/12
        ("172.15.255.255", false),
        ("172.16.0.0", true),
        ("172.31.255.255", true),
        ("172.32.0.0", false),
        // 192.0.0.0/24 and 192.0.2.0/24
        ("191.255.255.255", false),
        ("192.0.0.0", true),
        ("192.0.0.255", true),
        ("192.0.1.0", false),
        ("192.0.2.0", true),
        ("192.0.2.255", true),
        ("192.0.3.0", false),
        // 192.88.99.0/24 (6to4 relay)
        ("192.88.98.255", false),
        ("192.88.99.1", true),
        ("192.88.100.0", false),
        // 192.168.0.0/16
        ("192.167.255.255", false),
        ("192.168.0.0", true),
        ("192.168.255.255", true),
        ("192.169.0.0", false),
        // 198.18.0.0/15 (benchmarking) and 198.51.100.0/24
        ("198.17.255.255", false),
        ("198.18.0.0", true),
        ("198.19.255.255", true),
        ("198.20.0.0", false),
        ("198.51.99.255", false),
        ("198.51.100.0", true),
        ("198.51.100.255", true),
        ("198.51.101.0", false),
        // 203.0.113.0/24
        ("203.0.112.255", false),
        ("203.0.113.0", true),
        ("203.0.113.255", true),
        ("203.0.114.0", false),
        // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved, broadcast
        ("223.255.255.255", false),
        ("224.0.0.0", true),
        ("239.255.255.255", true),
        ("240.0.0.0", true),
        ("255.255.255.255", true),
        // public
        ("8.8.8.8", false),
        ("1.1.1.1", false),
        ("93.184.215.14", false),
    ]);
}

#[test]
fn ipv6_ranges_are_forbidden_on_both_sides_of_each_boundary() {
    assert_classified(&[
        ("::", true),
        ("::1", true),
        ("::2", true), // IPv4-compatible ::/96, deprecated
        // unique-local fc00::/7, with the AWS metadata address
        ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
        ("fc00::", true),
        ("fd00:ec2::254", true),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("fe00::", false),
        // link-local fe80::/10 and site-local fec0::/10
        ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
        ("fe80::", true),
        ("fe80::1", true),
        ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("fec0::", true),
        ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        // multicast ff00::/8
        ("ff02::1", true),
        ("ff0e::1", true),
        // documentation 2001:db8::/32 and 3fff::/20
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false),
        ("2001:db8::", true),
        ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("2001:db9::", false),
        ("3fff::1", true),
        ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ("3fff:1000::", false),
        // Teredo 2001::/32, discard-only 100::/64, local-use NAT64 64:ff9b:1::/48
        ("2001::1", true),
        ("2001:1::1", false),
        ("100::1", true),
        ("100:0:0:1::", false),
        ("64:ff9b:1::1", true),
        // public
        ("2606:4700:4700::1111", false),
        ("2001:4860:4860::8888", false),
    ]);
}

#[test]
fn ipv6_forms_that_embed_ipv4_are_judged_by_the_ipv4_address() {
    assert_classified(&[
        // IPv4-mapped ::ffff:a.b.c.d
        ("::ffff:127.0.0.1", true),
        ("::ffff:10.0.0.1", true),
        ("::ffff:169.254.169.254", true),
        ("::ffff:172.15.255.255", false),
        ("::ffff:172.16.0.0", true),
        ("::ffff:8.8.8.8", false),
        // IPv4-compatible ::a.b.c.d: refused whatever it embeds
        ("::127.0.0.1", true),
        ("::8.8.8.8", true),
        // NAT64 64:ff9b::/96
        ("64:ff9b::127.0.0.1", true),
        ("64:ff9b::a9fe:a9fe", true), // 169.254.169.254
        ("64:ff9b::10.0.0.1", true),
        ("64:ff9b::8.8.8.8", false),
        // 6to4 2002:aabb:ccdd::/48
        ("2002:7f00:1::", true),     // 127.0.0.1
        ("2002:a9fe:a9fe::1", true), // 169.254.169.254
        ("2002:c0a8:101::", true),   // 192.168.1.1
        ("2002:808:808::1", false),  // 8.8.8.8
    ]);
}

#[test]
fn a_mapped_address_is_allowlisted_by_its_ipv4_network() {
    let policy = EgressPolicy::strict().with_allowed_network(net("127.0.0.0/8"));
    assert!(policy.permits(ip("::ffff:127.0.0.1")));
    assert!(policy.permits(ip("127.0.0.1")));
    assert!(!policy.permits(ip("::1")), "127.0.0.0/8 does not cover the IPv6 loopback");
    assert!(!policy.permits(ip("10.0.0.1")));
}

// --- check_url -----------------------------------------------------------------------------

#[test]
fn the_default_policy_refuses_forbidden_literals_and_local_names() {
    let policy = EgressPolicy::strict();
    let refused = |u: &str| policy.check_url(&url(u)).unwrap_err();
    for u in [
        "https://127.0.0.1/",
        "https://127.0.0.1:8443/hook",
        "https://10.0.0.1/",
        "https://10.255.1.2/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:a9fe:a9fe]/",
        "https://[fd00:ec2::254]/",
        "https://[fe80::1]/",
        "https://0.0.0.0/",
        "https://2130706433/",   // 127.0.0.1 as one number
        "https://0x7f.1/",       // 127.0.0.1, hex and short
        "https://017700000001/", // 127.0.0.1, octal
    ] {
        assert!(matches!(refused(u), EgressError::ForbiddenAddress { .. }), "{u}: {:?}", refused(u));
    }
    for u in [
        "https://localhost/",
        "https://LOCALHOST./",
        "https://api.localhost/",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://metadata/",
        "https://db.internal/",
        "https://printer.local/",
        "https://router.home.arpa/",
    ] {
        assert!(matches!(refused(u), EgressError::ForbiddenHost { .. }), "{u}: {:?}", refused(u));
    }
}

#[test]
fn https_is_required_and_credentials_are_refused() {
    let policy = EgressPolicy::strict();
    assert_eq!(policy.check_url(&url("http://example.com/")), Err(EgressError::Scheme { scheme: "http".into() }));
    assert!(matches!(policy.check_url(&url("ftp://example.com/")), Err(EgressError::Scheme { .. })));
    assert!(matches!(policy.check_url(&url("file:///etc/passwd")), Err(EgressError::Scheme { .. })));
    assert_eq!(policy.check_url(&url("https://user:pw@example.com/")), Err(EgressError::Credentials));
    assert_eq!(policy.check_url(&url("https://user@example.com/")), Err(EgressError::Credentials));
    assert_eq!(policy.check_url(&url("https://example.com/hooks?token=x")), Ok(()));
    assert_eq!(policy.check_url(&url("https://8.8.8.8/")), Ok(()));
    assert_eq!(policy.check_url(&url("https://[2606:4700:4700::1111]/")), Ok(()));

    let http = EgressPolicy::strict().with_http(true);
    assert_eq!(http.check_url(&url("http://example.com/")), Ok(()));
    assert!(matches!(http.check_url(&url("ftp://example.com/")), Err(EgressError::Scheme { .. })));
    assert!(matches!(http.check_url(&url("http://127.0.0.1/")), Err(EgressError::ForbiddenAddress { .. })));
}

#[test]
fn the_allowlist_opens_exactly_what_it_names() {
    let policy = EgressPolicy::strict()
        .with_http(true)
        .with_allowed_network(net("127.0.0.0/8"))
        .with_allowed_host("Mock-Webhook.");
    assert_eq!(policy.check_url(&url("http://127.0.0.1:9000/")), Ok(()));
    assert_eq!(policy.check_url(&url("http://127.8.9.10/")), Ok(()));
    assert_eq!(policy.check_url(&url("http://[::ffff:127.0.0.1]/")), Ok(()));
    assert_eq!(policy.check_url(&url("http://mock-webhook/")), Ok(()));
    assert!(matches!(policy.check_url(&url("http://[::1]/")), Err(EgressError::ForbiddenAddress { .. })));
    assert!(matches!(policy.check_url(&url("http://10.0.0.1/")), Err(EgressError::ForbiddenAddress { .. })));
    assert!(matches!(policy.check_url(&url("http://169.254.169.254/")), Err(EgressError::ForbiddenAddress { .. })));
    // Allowing a network does not allow a local *name*.
    assert!(matches!(policy.check_url(&url("http://localhost/")), Err(EgressError::ForbiddenHost { .. })));
}

// --- configuration -------------------------------------------------------------------------

#[test]
fn policy_from_config_defaults_to_strict() {
    assert_eq!(EgressPolicy::from_config(&Config::default()).unwrap(), EgressPolicy::strict());
}

#[test]
fn policy_from_config_reads_the_allowlists() {
    let config = Config::from_pairs([
        ("Tracon__Egress__AllowHttp", "true"),
        ("Tracon__Egress__AllowedHosts__0", "LocalHost"),
        ("Tracon__Egress__AllowedHosts__1", "mock-webhook."),
        ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
        ("Tracon__Egress__AllowedNetworks__1", "::1"),
        ("Tracon__Egress__AllowedNetworks__2", "10.1.2.3/16"),
    ]);
    let policy = EgressPolicy::from_config(&config).unwrap();
    assert!(policy.allow_http);
    assert_eq!(policy.allowed_hosts, vec!["localhost".to_owned(), "mock-webhook".to_owned()]);
    assert_eq!(policy.allowed_networks, vec![net("127.0.0.0/8"), net("::1/128"), net("10.1.0.0/16")]);
}

#[test]
fn a_bad_allowlist_entry_is_an_error_naming_its_key() {
    let bad_net = Config::from_pairs([("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/33")]);
    let err = EgressPolicy::from_config(&bad_net).unwrap_err().to_string();
    assert!(err.contains("Tracon__Egress__AllowedNetworks__0"), "{err}");
    assert!(err.contains("CIDR"), "{err}");

    let address_as_host = Config::from_pairs([("Tracon__Egress__AllowedHosts__0", "127.0.0.1")]);
    let err = EgressPolicy::from_config(&address_as_host).unwrap_err().to_string();
    assert!(err.contains("AllowedNetworks"), "{err}");

    let bad_host = Config::from_pairs([("Tracon__Egress__AllowedHosts__0", "http://x/")]);
    assert!(EgressPolicy::from_config(&bad_host).is_err());

    let bad_bool = Config::from_pairs([("Tracon__Egress__AllowHttp", "sometimes")]);
    let err = EgressPolicy::from_config(&bad_bool).unwrap_err().to_string();
    assert!(err.contains("Tracon__Egress__AllowHttp"), "{err}");
}

// --- the resolver --------------------------------------------------------------------------

async fn resolve(resolver: &GuardedResolver, host: &str) -> Result<Vec<SocketAddr>, String> {
    let name: Name = host.parse().unwrap();
    resolver.resolve(name).await.map(|addrs| addrs.collect()).map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_resolver_drops_a_name_that_resolves_to_loopback() {
    let resolver = GuardedResolver::system(Arc::new(EgressPolicy::strict()));
    let err = resolve(&resolver, "localhost").await.unwrap_err();
    assert!(err.contains("localhost resolves only to"), "{err}");
}

#[tokio::test]
async fn the_resolver_keeps_only_allowlisted_addresses() {
    let policy = EgressPolicy::strict().with_allowed_network(net("127.0.0.0/8"));
    let resolver = GuardedResolver::system(Arc::new(policy));
    let addrs = resolve(&resolver, "localhost").await.unwrap();
    assert!(!addrs.is_empty());
    assert!(addrs.iter().all(|a| a.ip().is_ipv4() && a.ip().is_loopback()), "{addrs:?}");
}

#[tokio::test]
async fn an_allowlisted_host_keeps_all_its_addresses() {
    let policy = EgressPolicy::strict().with_allowed_host("localhost");
    let resolver = GuardedResolver::system(Arc::new(policy));
    let addrs = resolve(&resolver, "localhost").await.unwrap();
    assert!(addrs.iter().any(|a| a.ip() == ip("127.0.0.1")), "{addrs:?}");
}

/// A DNS that answers every name with fixed addresses: a public-looking name that
/// resolves to a private address (DNS rebinding), without the internet.
struct FixedDns(Vec<IpAddr>);

impl Resolve for FixedDns {
    fn resolve(&self, _name: Name) -> Resolving {
        let addrs: Vec<SocketAddr> = self.0.iter().map(|ip| SocketAddr::new(*ip, 0)).collect();
        Box::pin(async move { Ok(Box::new(addrs.into_iter()) as Addrs) })
    }
}

#[tokio::test]
async fn the_resolver_filters_a_mixed_answer() {
    let dns = Arc::new(FixedDns(vec![ip("10.0.0.7"), ip("93.184.215.14"), ip("169.254.169.254"), ip("::1")]));
    let resolver = GuardedResolver::over(Arc::new(EgressPolicy::strict()), dns.clone());
    let addrs = resolve(&resolver, "hooks.example.com").await.unwrap();
    assert_eq!(addrs.iter().map(|a| a.ip()).collect::<Vec<_>>(), vec![ip("93.184.215.14")]);
}

// --- requests to a local server ------------------------------------------------------------

/// A one-response-per-connection HTTP server on `bind` that counts the connections it
/// accepts. `respond` turns a request path into the raw response.
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Server {
    async fn start(bind: &str, respond: fn(&str, SocketAddr) -> String) -> Server {
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut read = 0;
                    while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") && read < buf.len() {
                        match socket.read(&mut buf[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => read += n,
                        }
                    }
                    let head = String::from_utf8_lossy(&buf[..read]);
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let _ = socket.write_all(respond(&path, addr).as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Server { addr, connections }
    }

    fn ok(_path: &str, _addr: SocketAddr) -> String {
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_owned()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn redirect_to(location: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
}

fn local_testing_policy() -> EgressPolicy {
    EgressPolicy::strict().with_http(true).with_allowed_network(net("127.0.0.0/8"))
}

async fn get(client: &EgressClient, u: &str) -> Result<reqwest::Response, tracon_core::egress::SendError> {
    let request = reqwest::Request::new(Method::GET, url(u));
    client.send(request).await
}

#[tokio::test]
async fn the_default_policy_refuses_loopback_before_connecting() {
    let server = Server::start("127.0.0.1:0", Server::ok).await;
    let port = server.addr.port();
    let client = EgressClient::new(EgressPolicy::strict()).unwrap();

    let err = get(&client, &format!("http://127.0.0.1:{port}/")).await.unwrap_err();
    assert!(matches!(err.refusal(), Some(EgressError::Scheme { .. })), "{err}");
    let err = get(&client, &format!("https://127.0.0.1:{port}/")).await.unwrap_err();
    assert!(matches!(err.refusal(), Some(EgressError::ForbiddenAddress { .. })), "{err}");
    let err = get(&client, &format!("https://localhost:{port}/")).await.unwrap_err();
    assert!(matches!(err.refusal(), Some(EgressError::ForbiddenHost { .. })), "{err}");
    let err = get(&client, &format!("https://[::ffff:127.0.0.1]:{port}/")).await.unwrap_err();
    assert!(matches!(err.refusal(), Some(EgressError::ForbiddenAddress { .. })), "{err}");
    assert!(client.request(Method::POST, url(&format!("https://127.0.0.1:{port}/"))).is_err());

    // http allowed, but the address is not.
    let http_only = EgressClient::new(EgressPolicy::strict().with_http(true)).unwrap();
    let err = get(&http_only, &format!("http://127.0.0.1:{port}/")).await.unwrap_err();
    assert!(matches!(err.refusal(), Some(EgressError::ForbiddenAddress { .. })), "{err}");

    assert_eq!(server.connections(), 0, "the guard must refuse before connecting");
}

#[tokio::test]
async fn the_allowlist_lets_a_local_request_through() {
    let server = Server::start("127.0.0.1:0", Server::ok).await;
    let client = EgressClient::new(local_testing_policy()).unwrap();
    let response = get(&client, &format!("http://127.0.0.1:{}/hook", server.addr.port())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "ok");

    let response = client
        .request(Method::POST, url(&format!("http://127.0.0.1:{}/hook", server.addr.port())))
        .unwrap()
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.connections(), 2);
}

#[tokio::test]
async fn an_allowlisted_host_name_connects_through_the_resolver() {
    let server = Server::start("127.0.0.1:0", Server::ok).await;
    let client = EgressClient::new(EgressPolicy::strict().with_http(true).with_allowed_host("localhost")).unwrap();
    let response = get(&client, &format!("http://localhost:{}/", server.addr.port())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(server.connections() >= 1);
}

#[tokio::test]
async fn a_public_name_that_resolves_to_loopback_is_refused_at_connect() {
    let server = Server::start("127.0.0.1:0", Server::ok).await;
    let rebinding = Arc::new(FixedDns(vec![ip("127.0.0.1")]));
    let client = EgressClient::with_resolver(EgressPolicy::strict().with_http(true), rebinding.clone()).unwrap();

    let err = get(&client, &format!("http://hooks.example.com:{}/", server.addr.port())).await.unwrap_err();
    assert_eq!(err.refusal(), Some(&EgressError::NoPermittedAddress { host: "hooks.example.com".into() }), "{err}");
    assert_eq!(server.connections(), 0);

    // With loopback allowlisted, the same resolution connects to the address it checked.
    let allowed = EgressClient::with_resolver(local_testing_policy(), rebinding).unwrap();
    let response = get(&allowed, &format!("http://hooks.example.com:{}/", server.addr.port())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_refused() {
    let server = Server::start("127.0.0.1:0", |_, _| redirect_to("http://169.254.169.254/latest/meta-data/iam/")).await;
    let client = EgressClient::new(local_testing_policy()).unwrap();
    let err = get(&client, &format!("http://127.0.0.1:{}/", server.addr.port())).await.unwrap_err();
    assert_eq!(err.refusal(), Some(&EgressError::ForbiddenAddress { ip: ip("169.254.169.254") }), "{err}");
}

#[tokio::test]
async fn a_redirect_to_a_forbidden_literal_never_reaches_it() {
    // The second server listens on 127.0.0.2; the policy allows only 127.0.0.1.
    let target = Server::start("127.0.0.2:0", Server::ok).await;
    let location = format!("http://{}/", target.addr);
    // `fn` pointers cannot capture, so the redirecting server reads the target from the path.
    let redirector = Server::start("127.0.0.1:0", |path, _| {
        let target = path.trim_start_matches("/to/");
        redirect_to(&format!("http://{target}/"))
    })
    .await;
    let policy = EgressPolicy::strict().with_http(true).with_allowed_network(net("127.0.0.1/32"));
    let client = EgressClient::new(policy).unwrap();

    let err =
        get(&client, &format!("http://127.0.0.1:{}/to/{}", redirector.addr.port(), target.addr)).await.unwrap_err();
    assert_eq!(err.refusal(), Some(&EgressError::ForbiddenAddress { ip: ip("127.0.0.2") }), "{err}");
    assert_eq!(redirector.connections(), 1);
    assert_eq!(target.connections(), 0, "{location} must never see a connection");

    // And a redirect to a local name is refused the same way.
    let err = get(&client, &format!("http://127.0.0.1:{}/to/localhost:{}", redirector.addr.port(), target.addr.port()))
        .await
        .unwrap_err();
    assert!(matches!(err.refusal(), Some(EgressError::ForbiddenHost { .. })), "{err}");
    assert_eq!(target.connections(), 0);
}

#[tokio::test]
async fn allowed_redirects_are_followed_and_bounded() {
    let server = Server::start("127.0.0.1:0", |path, addr| {
        if path == "/final" {
            Server::ok(path, addr)
        } else if path == "/loop" {
            redirect_to(&format!("http://{addr}/loop"))
        } else {
            redirect_to(&format!("http://{addr}/final"))
        }
    })
    .await;
    let client = EgressClient::new(local_testing_policy()).unwrap();

    let response = get(&client, &format!("http://{}/start", server.addr)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.url().path(), "/final");

    let err = get(&client, &format!("http://{}/loop", server.addr)).await.unwrap_err();
    assert_eq!(err.refusal(), Some(&EgressError::TooManyRedirects { max: MAX_REDIRECTS }), "{err}");
}
