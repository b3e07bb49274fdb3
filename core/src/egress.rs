//! The egress guard: outbound HTTP (webhooks, and any URL a tenant can name) reaches only
//! public addresses.
//!
//! Two checks make the guard, and every request passes both:
//!
//! 1. [`EgressPolicy::check_url`] — on the URL itself, before anything is sent: HTTPS only
//!    (plain HTTP only with `Tracon:Egress:AllowHttp`), no `user:password@`, a host, no
//!    local or internal *name* (`localhost`, `*.internal`, `metadata.google.internal`,
//!    `*.local`, …), and an IP-literal host ([`is_forbidden`]) checked directly. reqwest does
//!    not resolve an IP-literal host, so this is the only check such a URL gets; it runs
//!    again on every redirect hop.
//! 2. [`GuardedResolver`] (native only) — the DNS resolver of the HTTP client. It resolves
//!    the name and **drops every forbidden address** before the connector sees it, so the
//!    address actually connected is always one that was checked: there is no gap between
//!    a check and the connect for DNS rebinding to use.
//!
//! [`EgressClient`] wraps both: it checks the URL, then sends with a client built by
//! [`guarded_client_builder`] (guarded resolver, redirects re-checked hop by hop, proxies
//! from the environment ignored, timeouts set). Use it rather than a bare `reqwest::Client`
//! for any URL that did not come from the operator's own configuration.
//!
//! An explicit allowlist exists for local testing: `Tracon:Egress:AllowedNetworks:N`
//! (CIDR, `127.0.0.0/8`) lets those addresses through, and `Tracon:Egress:AllowedHosts:N`
//! exempts a host *name* (`localhost`, a compose service) from both the name rule and the
//! address filter.
//!
//! **On wasm32 (Cloudflare Workers)** DNS is not ours: the platform's `fetch` resolves and
//! connects. Only [`EgressPolicy::check_url`] applies there — literals and local names are
//! refused; a public name that resolves to a private address is left to the platform
//! (Workers cannot reach private networks).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::Url;

use crate::config::{Config, ConfigError, env_name};

/// Configuration key: allow plain `http://` URLs (local testing only). Default off.
pub const ALLOW_HTTP_KEY: &str = "Tracon:Egress:AllowHttp";
/// Configuration section: host names exempt from the guard, `…:AllowedHosts:0`, `:1`, ….
pub const ALLOWED_HOSTS_KEY: &str = "Tracon:Egress:AllowedHosts";
/// Configuration section: networks (CIDR) exempt from the guard, `…:AllowedNetworks:0`, ….
pub const ALLOWED_NETWORKS_KEY: &str = "Tracon:Egress:AllowedNetworks";

/// What outbound HTTP may reach. [`Default`] is the production policy: HTTPS to public
/// addresses only, no exceptions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Accept `http://` as well as `https://`.
    pub allow_http: bool,
    /// Host names (compared case-insensitively, without a trailing dot) exempt from the name
    /// rule and the address filter.
    pub allowed_hosts: Vec<String>,
    /// Networks whose addresses are let through although [`is_forbidden`] refuses them.
    pub allowed_networks: Vec<IpNet>,
}

/// Why an outbound request was refused. Messages name the host or address, never the full
/// URL (a webhook URL may carry a token in its path or query).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error("outbound URLs must use https (got {scheme}://); plain http needs {ALLOW_HTTP_KEY}")]
    Scheme { scheme: String },
    #[error("outbound URLs must not carry credentials (user:password@)")]
    Credentials,
    #[error("outbound URL has no host")]
    MissingHost,
    #[error("outbound host {host} is a local or internal name")]
    ForbiddenHost { host: String },
    #[error("outbound address {ip} is private, loopback, link-local or otherwise not public")]
    ForbiddenAddress { ip: IpAddr },
    #[error("outbound host {host} resolves only to private, loopback, link-local or otherwise non-public addresses")]
    NoPermittedAddress { host: String },
    #[error("could not resolve outbound host {host}: {message}")]
    Resolve { host: String, message: String },
    #[error("too many redirects (at most {max})")]
    TooManyRedirects { max: usize },
}

impl EgressPolicy {
    /// The production policy: HTTPS to public addresses only.
    pub fn strict() -> Self {
        Self::default()
    }

    /// Reads `Tracon:Egress:AllowHttp`, `Tracon:Egress:AllowedHosts:N` and
    /// `Tracon:Egress:AllowedNetworks:N`. A value that does not parse is an error naming its
    /// key, never silently skipped: a typo in an allowlist must not widen or narrow it quietly.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let allow_http = config.bool(ALLOW_HTTP_KEY)?.unwrap_or(false);
        let mut allowed_hosts = Vec::new();
        for (key, raw) in indexed_values(config, ALLOWED_HOSTS_KEY) {
            allowed_hosts.push(parse_allowed_host(&raw).map_err(|expected| invalid(&key, expected))?);
        }
        let mut allowed_networks = Vec::new();
        for (key, raw) in indexed_values(config, ALLOWED_NETWORKS_KEY) {
            allowed_networks.push(
                parse_network(&raw).ok_or_else(|| invalid(&key, "an IP network in CIDR notation (127.0.0.0/8)"))?,
            );
        }
        Ok(Self { allow_http, allowed_hosts, allowed_networks })
    }

    /// Builder: accept plain `http://`.
    pub fn with_http(mut self, allow: bool) -> Self {
        self.allow_http = allow;
        self
    }

    /// Builder: exempt a host name.
    pub fn with_allowed_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Builder: let a network through.
    pub fn with_allowed_network(mut self, network: IpNet) -> Self {
        self.allowed_networks.push(network);
        self
    }

    /// Whether `host` (a name, as in a URL) is on the host allowlist.
    pub fn host_is_allowed(&self, host: &str) -> bool {
        let host = canonical_name(host);
        self.allowed_hosts.iter().any(|h| canonical_name(h).eq_ignore_ascii_case(host))
    }

    /// Whether a connection to `ip` is permitted: on the network allowlist, or not
    /// [`is_forbidden`]. An IPv4-mapped IPv6 address is judged as the IPv4 address it is.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.allowed_networks.iter().any(|n| n.contains(&ip)) || !is_forbidden(ip)
    }

    /// The check on the URL itself; run before every request and on every redirect hop.
    pub fn check_url(&self, url: &Url) -> Result<(), EgressError> {
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            other => return Err(EgressError::Scheme { scheme: other.to_owned() }),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::Credentials);
        }
        // `url` has already normalised the host: IPv4 in dotted form (also from `2130706433`
        // or `0x7f.1`), IPv6 in brackets, names lowercased and IDNA-encoded.
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or(EgressError::MissingHost)?;
        if let Some(literal) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            let ip = literal.parse::<Ipv6Addr>().map_err(|_| EgressError::MissingHost)?;
            return self.check_ip(IpAddr::V6(ip));
        }
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return self.check_ip(IpAddr::V4(ip));
        }
        if self.host_is_allowed(host) || !is_local_name(host) {
            Ok(())
        } else {
            Err(EgressError::ForbiddenHost { host: host.to_owned() })
        }
    }

    fn check_ip(&self, ip: IpAddr) -> Result<(), EgressError> {
        if self.permits(ip) { Ok(()) } else { Err(EgressError::ForbiddenAddress { ip }) }
    }
}

// ---------------------------------------------------------------------------------------
// Address classification
// ---------------------------------------------------------------------------------------

/// IPv4 ranges refused besides those std classifies (unspecified, loopback, private,
/// link-local, broadcast, multicast, documentation).
const V4_FORBIDDEN: [Ipv4Net; 6] = [
    Ipv4Net::new_assert(Ipv4Addr::new(0, 0, 0, 0), 8),     // "this network"
    Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 10), // carrier-grade NAT (shared)
    Ipv4Net::new_assert(Ipv4Addr::new(192, 0, 0, 0), 24),  // IETF protocol assignments
    Ipv4Net::new_assert(Ipv4Addr::new(192, 88, 99, 0), 24), // 6to4 relay anycast (deprecated)
    Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15), // benchmarking
    Ipv4Net::new_assert(Ipv4Addr::new(240, 0, 0, 0), 4),   // reserved, with 255.255.255.255
];

/// IPv6 ranges refused outright besides those std classifies (unspecified, loopback,
/// multicast, unique-local, link-local).
const V6_FORBIDDEN: [Ipv6Net; 7] = [
    // IPv4-compatible (deprecated, RFC 4291): never a legitimate destination.
    Ipv6Net::new_assert(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96),
    Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use NAT64
    Ipv6Net::new_assert(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),     // discard-only
    Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32),    // Teredo
    Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
    Ipv6Net::new_assert(Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20),    // documentation
    Ipv6Net::new_assert(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),    // site-local
];

/// Well-known NAT64 (RFC 6052): the last 32 bits are an IPv4 address, judged as such.
const NAT64: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);
/// 6to4 (RFC 3056): bits 16–48 are an IPv4 address, judged as such.
const SIX_TO_FOUR: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);

/// Whether `ip` is not a public unicast address and so never an egress destination:
/// loopback, private, link-local (cloud metadata `169.254.169.254`, `fd00:ec2::254`),
/// carrier-grade NAT, unspecified, broadcast, multicast, reserved, documentation and
/// benchmarking ranges — and any IPv6 form that embeds such an IPv4 address
/// (`::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`).
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_is_forbidden(v4),
        IpAddr::V6(v6) => v6_is_forbidden(v6),
    }
}

fn v4_is_forbidden(ip: Ipv4Addr) -> bool {
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || V4_FORBIDDEN.iter().any(|n| n.contains(&ip))
}

fn v6_is_forbidden(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_is_forbidden(v4);
    }
    if ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
        || V6_FORBIDDEN.iter().any(|n| n.contains(&ip))
    {
        return true;
    }
    let bits = ip.to_bits();
    if NAT64.contains(&ip) {
        // The low 32 bits, by construction of the /96.
        return v4_is_forbidden(Ipv4Addr::from_bits((bits & 0xffff_ffff) as u32));
    }
    if SIX_TO_FOUR.contains(&ip) {
        return v4_is_forbidden(Ipv4Addr::from_bits(((bits >> 80) & 0xffff_ffff) as u32));
    }
    false
}

/// Host names that only ever mean something local or internal: `localhost` and its
/// subdomains, `*.local` (mDNS), `*.internal` (cloud-internal names, including
/// `metadata.google.internal`), `*.home.arpa`, and the bare `metadata` of GCE. On native
/// builds the resolver catches any other name that resolves to a forbidden address; on
/// wasm32 this list is all there is.
pub fn is_local_name(host: &str) -> bool {
    let host = canonical_name(host).to_ascii_lowercase();
    const EXACT: [&str; 5] = ["localhost", "local", "internal", "home.arpa", "metadata"];
    const SUFFIXES: [&str; 4] = [".localhost", ".local", ".internal", ".home.arpa"];
    EXACT.contains(&host.as_str()) || SUFFIXES.iter().any(|s| host.ends_with(s))
}

/// A host name without its trailing root dot (`localhost.` is `localhost`).
fn canonical_name(host: &str) -> &str {
    host.strip_suffix('.').unwrap_or(host)
}

// ---------------------------------------------------------------------------------------
// Configuration helpers
// ---------------------------------------------------------------------------------------

/// The values of `section:0`, `section:1`, … with the key each came from.
fn indexed_values(config: &Config, section: &str) -> Vec<(String, String)> {
    config
        .child_sections(section)
        .into_iter()
        .filter_map(|child| {
            let key = format!("{section}:{child}");
            config.get(&key).map(|v| (key, v.trim().to_owned()))
        })
        .collect()
}

fn invalid(key: &str, expected: &'static str) -> ConfigError {
    ConfigError::Invalid { key: format!("{key} ({})", env_name(key)), expected }
}

fn parse_allowed_host(raw: &str) -> Result<String, &'static str> {
    let host = canonical_name(raw.trim()).to_ascii_lowercase();
    if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
        return Err("a host name (put addresses in Tracon:Egress:AllowedNetworks)");
    }
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if valid { Ok(host) } else { Err("a host name (letters, digits, '-', '.')") }
}

/// `127.0.0.0/8`, `fd00::/8`; a bare address is a single-address network.
fn parse_network(raw: &str) -> Option<IpNet> {
    raw.parse::<IpNet>().ok().or_else(|| raw.parse::<IpAddr>().ok().map(IpNet::from)).map(|n| n.trunc())
}

// ---------------------------------------------------------------------------------------
// Native: the guarded resolver and client
// ---------------------------------------------------------------------------------------

#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use reqwest::dns::{Addrs, Name, Resolve, Resolving};

    use super::{EgressError, EgressPolicy};

    /// Redirect hops [`EgressClient`] follows, each re-checked with
    /// [`EgressPolicy::check_url`].
    pub const MAX_REDIRECTS: usize = 5;
    /// Time allowed to open a connection.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Time allowed for a whole request, body included.
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

    /// A `reqwest` DNS resolver that resolves a name and keeps only the addresses the policy
    /// permits, failing the resolution when none remain. The connector only ever sees the
    /// addresses this returns, so the address connected is the address checked.
    ///
    /// reqwest does not call a resolver for an IP-literal host: pair it with
    /// [`EgressPolicy::check_url`] (as [`EgressClient`] does).
    #[derive(Clone)]
    pub struct GuardedResolver {
        policy: Arc<EgressPolicy>,
        inner: Option<Arc<dyn Resolve>>,
    }

    impl GuardedResolver {
        /// Resolves with the system resolver (`tokio::net::lookup_host`).
        pub fn system(policy: Arc<EgressPolicy>) -> Self {
            Self { policy, inner: None }
        }

        /// Resolves with another resolver (a custom DNS client, or a fixed table in tests)
        /// and filters what it returns.
        pub fn over(policy: Arc<EgressPolicy>, inner: Arc<dyn Resolve>) -> Self {
            Self { policy, inner: Some(inner) }
        }
    }

    impl Resolve for GuardedResolver {
        fn resolve(&self, name: Name) -> Resolving {
            let policy = Arc::clone(&self.policy);
            let inner = self.inner.clone();
            let host = name.as_str().to_owned();
            Box::pin(async move {
                let resolved: Vec<SocketAddr> = match inner {
                    Some(inner) => inner
                        .resolve(name)
                        .await
                        .map_err(|e| EgressError::Resolve { host: host.clone(), message: e.to_string() })?
                        .collect(),
                    None => tokio::net::lookup_host((host.as_str(), 0))
                        .await
                        .map_err(|e| EgressError::Resolve { host: host.clone(), message: e.to_string() })?
                        .collect(),
                };
                if resolved.is_empty() {
                    return Err(EgressError::Resolve { host, message: "no addresses".into() }.into());
                }
                let kept: Vec<SocketAddr> = if policy.host_is_allowed(&host) {
                    resolved
                } else {
                    resolved.into_iter().filter(|a| policy.permits(a.ip())).collect()
                };
                if kept.is_empty() {
                    return Err(EgressError::NoPermittedAddress { host }.into());
                }
                Ok(Box::new(kept.into_iter()) as Addrs)
            })
        }
    }

    /// A `reqwest::ClientBuilder` with the guard in place: the [`GuardedResolver`], a
    /// redirect policy that re-checks each hop with [`EgressPolicy::check_url`] (a hop to an
    /// IP literal bypasses DNS, so this is what refuses it) and stops after
    /// [`MAX_REDIRECTS`], proxies from the environment ignored (a proxy would resolve and
    /// connect for us, unchecked), and timeouts. Tune timeouts on it if needed; replacing its
    /// resolver or redirect policy removes the guard. The URL of the first request still
    /// needs [`EgressPolicy::check_url`] — prefer [`EgressClient`], which does both.
    pub fn guarded_client_builder(policy: Arc<EgressPolicy>) -> reqwest::ClientBuilder {
        guarded_builder(policy, None, Redirects::Follow)
    }

    /// [`guarded_client_builder`], built.
    pub fn guarded_client(policy: Arc<EgressPolicy>) -> Result<reqwest::Client, reqwest::Error> {
        guarded_client_builder(policy).build()
    }

    /// [`guarded_client`] that follows no redirect: a `3xx` is the answer (OAuth token
    /// requests, whose body carries a code verifier or a refresh token that must not be
    /// re-sent to wherever a `307` points).
    pub fn guarded_client_without_redirects(policy: Arc<EgressPolicy>) -> Result<reqwest::Client, reqwest::Error> {
        guarded_builder(policy, None, Redirects::Refuse).build()
    }

    /// Whether an [`EgressClient`] follows redirects.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Redirects {
        /// Up to [`MAX_REDIRECTS`] hops, each re-checked by the guard.
        Follow,
        /// None: a `3xx` is the answer (webhook deliveries, which must not be re-sent
        /// elsewhere, or turned into a bodiless `GET` by a `302`).
        Refuse,
    }

    fn guarded_builder(
        policy: Arc<EgressPolicy>,
        inner: Option<Arc<dyn Resolve>>,
        redirects: Redirects,
    ) -> reqwest::ClientBuilder {
        let resolver = match inner {
            Some(inner) => GuardedResolver::over(Arc::clone(&policy), inner),
            None => GuardedResolver::system(Arc::clone(&policy)),
        };
        let redirect_policy = Arc::clone(&policy);
        let redirect = match redirects {
            Redirects::Refuse => reqwest::redirect::Policy::none(),
            Redirects::Follow => reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() > MAX_REDIRECTS {
                    return attempt.error(EgressError::TooManyRedirects { max: MAX_REDIRECTS });
                }
                let verdict = redirect_policy.check_url(attempt.url());
                match verdict {
                    Ok(()) => attempt.follow(),
                    Err(refused) => attempt.error(refused),
                }
            }),
        };
        reqwest::Client::builder()
            .dns_resolver(resolver)
            .redirect(redirect)
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
    }

    /// Why [`EgressClient::send`] failed.
    #[derive(Debug, thiserror::Error)]
    pub enum SendError {
        /// The guard refused the URL, a redirect hop, or every resolved address. Nothing was
        /// sent to the refused destination.
        #[error(transparent)]
        Refused(EgressError),
        /// The request itself failed (connect, TLS, timeout, …).
        #[error("outbound request failed: {0}")]
        Http(#[source] reqwest::Error),
    }

    impl From<reqwest::Error> for SendError {
        /// A refusal raised inside reqwest (by the resolver or the redirect policy) comes back
        /// as [`SendError::Refused`].
        fn from(err: reqwest::Error) -> Self {
            match egress_cause(&err) {
                Some(refused) => SendError::Refused(refused),
                None => SendError::Http(err),
            }
        }
    }

    impl SendError {
        /// The refusal, if this was one.
        pub fn refusal(&self) -> Option<&EgressError> {
            match self {
                SendError::Refused(e) => Some(e),
                SendError::Http(_) => None,
            }
        }
    }

    fn egress_cause(err: &(dyn std::error::Error + 'static)) -> Option<EgressError> {
        let mut current = Some(err);
        while let Some(e) = current {
            if let Some(refused) = e.downcast_ref::<EgressError>() {
                return Some(refused.clone());
            }
            current = e.source();
        }
        None
    }

    /// Outbound HTTP behind the egress guard: [`EgressPolicy::check_url`] before every
    /// request, then a client from [`guarded_client_builder`] (resolved addresses filtered,
    /// redirect hops re-checked).
    #[derive(Clone)]
    pub struct EgressClient {
        policy: Arc<EgressPolicy>,
        client: reqwest::Client,
    }

    impl EgressClient {
        /// A client that resolves with the system resolver and follows re-checked redirects.
        pub fn new(policy: EgressPolicy) -> Result<Self, SendError> {
            Self::build(policy, None, Redirects::Follow)
        }

        /// A client that resolves with `inner` (whose answers are filtered all the same).
        pub fn with_resolver(policy: EgressPolicy, inner: Arc<dyn Resolve>) -> Result<Self, SendError> {
            Self::build(policy, Some(inner), Redirects::Follow)
        }

        /// A client resolving with `inner` (the system resolver without one), following
        /// redirects or not.
        pub fn build(
            policy: EgressPolicy,
            inner: Option<Arc<dyn Resolve>>,
            redirects: Redirects,
        ) -> Result<Self, SendError> {
            let policy = Arc::new(policy);
            let client = guarded_builder(Arc::clone(&policy), inner, redirects).build().map_err(SendError::Http)?;
            Ok(Self { policy, client })
        }

        pub fn policy(&self) -> &EgressPolicy {
            &self.policy
        }

        /// A request builder for a checked URL. Its URL cannot change afterwards, so
        /// `builder.send()` is guarded too (its errors convert with `SendError::from`).
        pub fn request(
            &self,
            method: reqwest::Method,
            url: reqwest::Url,
        ) -> Result<reqwest::RequestBuilder, EgressError> {
            self.policy.check_url(&url)?;
            Ok(self.client.request(method, url))
        }

        /// Checks the request's URL, then sends it.
        pub async fn send(&self, request: reqwest::Request) -> Result<reqwest::Response, SendError> {
            self.policy.check_url(request.url()).map_err(SendError::Refused)?;
            Ok(self.client.execute(request).await?)
        }
    }
}
