//! The stores' own connection pool against a real database: a connection in use a moment ago
//! is handed out with no round trip first; one that sat idle is checked and replaced when its
//! server ended it; one left in a transaction is rolled back before anyone else gets it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tracon_postgres::driver::Driver;
use tracon_postgres::pg::{PING_WHEN_IDLE_FOR, PgSettings, SqlxDriver, connect};

fn database_url() -> String {
    std::env::var("TRACON_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| panic!("These tests need PostgreSQL: run ./scripts/test, or set TRACON_TEST_DATABASE_URL."))
}

/// A driver whose pool holds one connection.
async fn one_connection(url: &str) -> SqlxDriver {
    let mut settings = PgSettings::new(url);
    settings.max_connections = 1;
    SqlxDriver::new(connect(&settings).await.unwrap()).unwrap()
}

async fn backend_pid(driver: &SqlxDriver) -> i32 {
    let rows = driver.query("SELECT pg_backend_pid() AS pid", &[]).await.unwrap();
    let pid: i64 = rows[0].get("pid").unwrap();
    i32::try_from(pid).unwrap()
}

#[tokio::test]
async fn a_connection_ended_while_idle_is_replaced_before_a_statement_uses_it() {
    let driver = one_connection(&database_url()).await;
    let admin = connect(&PgSettings::new(&database_url())).await.unwrap();
    let pid = backend_pid(&driver).await;

    // The server ends the pool's one connection; the pool finds out when it next hands it out.
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(&admin).await.unwrap();
    assert!(ended);
    tokio::time::sleep(PING_WHEN_IDLE_FOR + Duration::from_millis(200)).await;
    assert_ne!(backend_pid(&driver).await, pid, "a new connection took the ended one's place");
}

#[tokio::test]
async fn a_transaction_dropped_uncommitted_is_rolled_back_before_its_connection_is_used_again() {
    let driver = one_connection(&database_url()).await;
    driver.execute("CREATE TEMP TABLE IF NOT EXISTS pool_t (v int)", &[]).await.unwrap();
    let mut tx = driver.transaction().await.unwrap();
    tx.execute("INSERT INTO pool_t VALUES (1)", &[]).await.unwrap();
    drop(tx);
    let rows = driver.query("SELECT count(*) AS n FROM pool_t", &[]).await.unwrap();
    assert_eq!(rows[0].get::<i64>("n").unwrap(), 0, "the abandoned insert was rolled back");
    let rows = driver.query("SELECT (pg_current_xact_id_if_assigned() IS NULL) AS fresh", &[]).await.unwrap();
    assert!(rows[0].get::<bool>("fresh").unwrap(), "no transaction is left open");
}

#[tokio::test]
async fn a_connection_in_use_a_moment_ago_is_handed_out_without_a_round_trip_first() {
    // Between the driver and the server: a relay that counts the client's Sync messages. A
    // statement ends with one; a ping is one on its own.
    let url = database_url();
    let (upstream, through) = relayed(&url);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay = listener.local_addr().unwrap();
    let syncs = Arc::new(AtomicUsize::new(0));
    let counted = syncs.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let counted = counted.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = client_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let sync = buf[..n].windows(5).filter(|w| *w == [b'S', 0, 0, 0, 4]).count();
                    counted.fetch_add(sync, Ordering::SeqCst);
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    let count = || syncs.load(Ordering::SeqCst);

    // What 50 statements send on a bare connection, which never pings.
    let mut bare: sqlx::PgConnection = sqlx::Connection::connect(&through(relay)).await.unwrap();
    sqlx::query("SELECT 1").execute(&mut bare).await.unwrap();
    let before = count();
    for _ in 0..50 {
        sqlx::query("SELECT 1").execute(&mut bare).await.unwrap();
    }
    let bare_syncs = count() - before;

    // The same through the stores' pool: nothing more.
    let driver = one_connection(&through(relay)).await;
    driver.execute("SELECT 1", &[]).await.unwrap();
    let before = count();
    for _ in 0..50 {
        driver.execute("SELECT 1", &[]).await.unwrap();
    }
    assert_eq!(count() - before, bare_syncs, "the pool adds no round trip to a connection in use a moment ago");
}

/// The `host:port` a `postgres://user@host:port/db` URL names, and the same URL through
/// another address.
fn relayed(url: &str) -> (String, impl Fn(std::net::SocketAddr) -> String + use<>) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, rest) = rest.rsplit_once('@').map_or(("", rest), |(u, r)| (u, r));
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let upstream = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:5432") };
    let (scheme, user, path) = (scheme.to_owned(), user.to_owned(), path.to_owned());
    let at = if user.is_empty() { String::new() } else { format!("{user}@") };
    (upstream, move |relay| format!("{scheme}://{at}{relay}/{path}"))
}

#[tokio::test]
async fn a_definition_written_is_announced_on_the_signal_channel_when_its_write_commits() {
    use tracon_core::definition::AgentDefinition;
    use tracon_core::names::{AgentName, TenantId};
    let mut settings = PgSettings::new(&database_url());
    settings.schema = format!("n_{}", uuid::Uuid::new_v4().simple());
    let pool = connect(&settings).await.unwrap();
    tracon_postgres::pg::migrate(&pool, &settings.schema).await.unwrap();
    let stores = tracon_postgres::pg::stores_on(pool.clone(), tracon_postgres::protect::Protection::off()).unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await.unwrap();
    listener.listen(tracon_core::runs::drain::Signal::CHANNEL).await.unwrap();
    let tenant = TenantId::parse("acme").unwrap();

    stores
        .definitions
        .create(&tenant, AgentDefinition::new("writer", "scripted", "m"), chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(next(&mut listener).await, "defs:acme");
    assert!(stores.definitions.delete(&tenant, &AgentName::parse("writer").unwrap()).await.unwrap());
    assert_eq!(next(&mut listener).await, "defs:acme");
    let signal = tracon_core::runs::drain::Signal::parse("defs:acme").unwrap();
    assert_eq!(signal, tracon_core::runs::drain::Signal::Definitions(tenant));
}

/// The next notification's payload (bounded, so a missing one fails instead of hanging).
async fn next(listener: &mut sqlx::postgres::PgListener) -> String {
    let heard = tokio::time::timeout(Duration::from_secs(30), listener.recv()).await;
    heard.expect("a notification").unwrap().payload().to_owned()
}
