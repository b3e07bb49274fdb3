//! Postgres from a Worker: the [`Driver`] every store is written over
//! ([`tracon_postgres::store`]), on tokio-postgres over a `worker::Socket` to Hyperdrive.
//! Only the connection handling lives here; statements, codecs and store logic are the ones
//! the sqlx stores run.
//!
//! Every statement opens its own connection (Hyperdrive pools the real ones) and closes it
//! before returning: the client is dropped and the connection future awaited, so no socket
//! outlives the call — the pattern the toolchain notes found necessary under workerd. A
//! transaction holds one connection from `BEGIN` to `COMMIT`. JavaScript futures are `!Send`;
//! a Worker isolate is single-threaded, so each call is wrapped in `SendWrapper` to meet the
//! driver's `Send` bounds.

use std::sync::Arc;

use bytes::BytesMut;
use futures::FutureExt;
use futures::future::RemoteHandle;
use send_wrapper::SendWrapper;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Column};
use tracon_core::error::StoreError;
use tracon_postgres::driver::{ATTEMPTS, Cell, Driver, Param, Row, Transaction, backoff};
use tracon_postgres::settings::PgSettings;
use worker::{SecureTransport, Socket};

/// Where Postgres is (from the Hyperdrive binding) and how to talk to it.
#[derive(Clone)]
pub struct PgTarget {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
    pub settings: PgSettings,
}

/// One open connection; [`Conn::close`] ends it and waits until the socket is closed.
///
/// A store call can also be dropped half way (the client of a streamed response went away
/// and workerd cancelled the request). Then the connection task is dropped with it: the
/// socket belongs to that request's I/O context, which workerd tears down with the
/// request. (Letting the task run on instead was tried: touching a cancelled request's
/// socket aborted the whole isolate.)
struct Conn {
    client: Client,
    done: RemoteHandle<()>,
}

impl Conn {
    async fn close(self) {
        drop(self.client);
        self.done.await;
    }
}

/// Maps a driver error by SQLSTATE, exactly as the sqlx driver does
/// ([`tracon_postgres::codec::sqlstate_error`]).
fn map_err(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(code) => tracon_postgres::codec::sqlstate_error(code.code(), e.to_string()),
        // A connection that broke (closed, or an I/O error on the socket) may work again;
        // anything else without a SQLSTATE — a value that does not decode, a missing column
        // — will not, and must not send callers into a retry loop.
        None if e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) => {
            StoreError::Unavailable { detail: e.to_string() }
        }
        None => StoreError::Internal { detail: e.to_string() },
    }
}

fn retryable(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| tracon_postgres::codec::is_retryable_sqlstate(c.code()))
}

impl PgTarget {
    async fn open(&self) -> Result<Conn, StoreError> {
        let s = &self.settings;
        let socket = Socket::builder()
            .secure_transport(if s.tls { SecureTransport::StartTls } else { SecureTransport::Off })
            .connect(self.host.clone(), self.port)
            .map_err(|e| StoreError::Unavailable { detail: format!("socket: {e}") })?;
        let mut config = tokio_postgres::Config::new();
        config
            .user(&self.user)
            .password(&self.password)
            .dbname(&self.database)
            .application_name(&s.application_name)
            .options(format!("-c search_path={} -c statement_timeout={}", s.schema, s.statement_timeout.as_millis()));
        if !s.tls {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        }
        let (client, connection) =
            config.connect_raw(socket, worker::postgres_tls::PassthroughTls).await.map_err(map_err)?;
        let (driver, done) = connection
            .map(|r| {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "postgres connection ended with an error");
                }
            })
            .remote_handle();
        wasm_bindgen_futures::spawn_local(driver);
        Ok(Conn { client, done })
    }
}

/// A [`Param`] as tokio-postgres binds it.
#[derive(Debug)]
struct Bound<'a>(Param<'a>);

impl ToSql for Bound<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Param::Text(v) => v.to_sql(ty, out),
            Param::Int(v) => v.to_sql(ty, out),
            Param::BigInt(v) => v.to_sql(ty, out),
            Param::Bool(v) => v.to_sql(ty, out),
            Param::Uuid(v) => v.to_sql(ty, out),
            Param::Time(v) => v.to_sql(ty, out),
            Param::Bytes(v) => v.to_sql(ty, out),
            Param::Json(v) => v.to_sql(ty, out),
            Param::Texts(v) => v.to_sql(ty, out),
            Param::Strs(v) => v.to_sql(ty, out),
            Param::OptTexts(v) => v.to_sql(ty, out),
            Param::BigInts(v) => v.to_sql(ty, out),
            Param::Uuids(v) => v.to_sql(ty, out),
            Param::OptUuids(v) => v.to_sql(ty, out),
            Param::Times(v) => v.to_sql(ty, out),
            Param::OptTimes(v) => v.to_sql(ty, out),
            Param::ByteStrings(v) => v.to_sql(ty, out),
        }
    }

    /// Each variant checks its own type in `to_sql`.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn bound<'a>(params: &'a [Param<'a>]) -> Vec<Bound<'a>> {
    params.iter().copied().map(Bound).collect()
}

fn refs<'a>(bound: &'a [Bound<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    bound.iter().map(|b| b as &(dyn ToSql + Sync)).collect()
}

fn cell(row: &tokio_postgres::Row, i: usize, column: &Column) -> Result<Cell, StoreError> {
    fn get<'r, T: tokio_postgres::types::FromSql<'r>>(
        row: &'r tokio_postgres::Row,
        i: usize,
        wrap: impl FnOnce(T) -> Cell,
    ) -> Result<Cell, StoreError> {
        Ok(row.try_get::<_, Option<T>>(i).map_err(map_err)?.map_or(Cell::Null, wrap))
    }
    let ty = column.type_();
    match *ty {
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => get(row, i, Cell::Text),
        Type::INT2 => get::<i16>(row, i, |v| Cell::Int(v.into())),
        Type::INT4 => get::<i32>(row, i, |v| Cell::Int(v.into())),
        Type::INT8 => get::<i64>(row, i, Cell::Int),
        Type::FLOAT4 => get::<f32>(row, i, |v| Cell::Float(v.into())),
        Type::FLOAT8 => get::<f64>(row, i, Cell::Float),
        Type::BOOL => get(row, i, Cell::Bool),
        Type::UUID => get(row, i, Cell::Uuid),
        Type::TIMESTAMPTZ => get(row, i, Cell::Time),
        Type::BYTEA => get(row, i, Cell::Bytes),
        Type::JSON | Type::JSONB => get(row, i, Cell::Json),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY => get(row, i, Cell::Texts),
        _ => {
            Err(StoreError::Internal { detail: format!("column '{}' has a type no store reads: {ty}", column.name()) })
        }
    }
}

fn rows(found: Vec<tokio_postgres::Row>) -> Result<Vec<Row>, StoreError> {
    let Some(first) = found.first() else { return Ok(Vec::new()) };
    let columns: Arc<[String]> = first.columns().iter().map(|c| c.name().to_owned()).collect();
    found
        .iter()
        .map(|r| {
            let cells = r.columns().iter().enumerate().map(|(i, c)| cell(r, i, c)).collect::<Result<_, _>>()?;
            Ok(Row::new(columns.clone(), cells))
        })
        .collect()
}

/// The stores' driver on a Worker.
pub struct WorkerDriver {
    pub target: PgTarget,
}

impl WorkerDriver {
    /// `f` on a fresh connection, closed afterwards; a serialization failure or deadlock is
    /// tried again on the same connection.
    async fn with<T>(&self, f: impl AsyncFn(&Client) -> Result<T, tokio_postgres::Error>) -> Result<T, StoreError> {
        let conn = self.target.open().await?;
        let mut attempt = 0;
        let result = loop {
            match f(&conn.client).await {
                Ok(v) => break Ok(v),
                Err(e) if retryable(&e) && attempt + 1 < ATTEMPTS => {
                    attempt += 1;
                    worker::Delay::from(backoff(attempt)).await;
                }
                Err(e) => break Err(map_err(e)),
            }
        };
        conn.close().await;
        result
    }
}

#[async_trait::async_trait]
impl Driver for WorkerDriver {
    async fn query(&self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        SendWrapper::new(async {
            let bound = bound(params);
            let found = self.with(async |c| c.query(sql, &refs(&bound)).await).await?;
            rows(found)
        })
        .await
    }

    async fn execute(&self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        SendWrapper::new(async {
            let bound = bound(params);
            self.with(async |c| c.execute(sql, &refs(&bound)).await).await
        })
        .await
    }

    async fn transaction(&self) -> Result<Box<dyn Transaction>, StoreError> {
        SendWrapper::new(async {
            let conn = self.target.open().await?;
            if let Err(e) = conn.client.batch_execute("BEGIN").await {
                conn.close().await;
                return Err(map_err(e));
            }
            Ok(Box::new(WorkerTransaction(SendWrapper::new(Some(conn)))) as Box<dyn Transaction>)
        })
        .await
    }
}

/// One connection inside `BEGIN`. Dropped uncommitted, its connection goes with it and the
/// server rolls the transaction back.
struct WorkerTransaction(SendWrapper<Option<Conn>>);

impl WorkerTransaction {
    fn client(&self) -> Result<&Client, StoreError> {
        self.0.as_ref().map(|c| &c.client).ok_or_else(|| StoreError::Internal { detail: "transaction closed".into() })
    }
}

#[async_trait::async_trait]
impl Transaction for WorkerTransaction {
    async fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        SendWrapper::new(async {
            let bound = bound(params);
            rows(self.client()?.query(sql, &refs(&bound)).await.map_err(map_err)?)
        })
        .await
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        SendWrapper::new(async {
            let bound = bound(params);
            self.client()?.execute(sql, &refs(&bound)).await.map_err(map_err)
        })
        .await
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        SendWrapper::new(async move {
            let conn = self.0.take().ok_or_else(|| StoreError::Internal { detail: "transaction closed".into() })?;
            let committed = conn.client.batch_execute("COMMIT").await.map_err(map_err);
            conn.close().await;
            committed
        })
        .await
    }
}
