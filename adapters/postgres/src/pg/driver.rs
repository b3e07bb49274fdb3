//! [`Driver`] on sqlx: the stores' own pool of connections, statements bound from
//! [`Param`]s, rows decoded into [`Cell`]s by their column types.
//!
//! **Why not sqlx's pool.** sqlx 0.8's `Pool` pings every connection it takes back (and, by
//! default, every one it hands out): two extra round trips, and a spawned task, per
//! statement — on a recorded run, more of the server's CPU than the statements themselves.
//! The stores' statements run on [`Connections`] instead (deadpool, a well-kept generic pool,
//! over sqlx's `PgConnection`): a connection that finished its last exchange a moment ago is
//! handed out as it is; one whose statement was abandoned half-way (its future dropped) or
//! left in a transaction, or that sat idle [`PING_WHEN_IDLE_FOR`], is checked first — rolled
//! back, its pending answers drained by a ping — and replaced when the check fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool::managed::{self, Metrics, Object, RecycleResult};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgRow};
use sqlx::query::Query;
use sqlx::{Column, ConnectOptions, Connection, PgPool, Postgres, Row as _, TypeInfo};
use tracon_core::error::StoreError;

use super::map_err;
use crate::driver::{ATTEMPTS, Cell, Driver, Param, Row, Transaction, backoff};

/// How long a connection may sit idle before it is pinged as it is handed out.
pub const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// One of the stores' connections and what the pool must know about its last use.
pub struct Conn {
    raw: PgConnection,
    /// Its last exchange ran to its end: no answer is pending, no transaction is open.
    settled: bool,
    /// A transaction was begun on it and neither committed nor rolled back.
    in_transaction: bool,
    used: Instant,
}

impl Conn {
    /// After a statement: settled unless the exchange broke off (the connection's state is
    /// then unknown, and the pool checks it before handing it out again).
    fn after<T>(&mut self, result: &Result<T, sqlx::Error>) {
        self.used = Instant::now();
        self.settled = match result {
            Ok(_) => true,
            // The server answered, the exchange ran to ReadyForQuery.
            Err(sqlx::Error::Database(_) | sqlx::Error::RowNotFound | sqlx::Error::ColumnDecode { .. }) => true,
            Err(_) => false,
        };
    }
}

/// Opens and checks the stores' connections.
pub struct Manager {
    options: PgConnectOptions,
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<Conn, sqlx::Error> {
        let raw = self.options.connect().await?;
        Ok(Conn { raw, settled: true, in_transaction: false, used: Instant::now() })
    }

    async fn recycle(&self, conn: &mut Conn, _: &Metrics) -> RecycleResult<sqlx::Error> {
        if conn.in_transaction {
            // Abandoned uncommitted: what it wrote goes.
            sqlx::query("ROLLBACK").execute(&mut conn.raw).await?;
            conn.in_transaction = false;
            conn.settled = true;
        }
        if !conn.settled || conn.used.elapsed() >= PING_WHEN_IDLE_FOR {
            conn.raw.ping().await?;
            conn.settled = true;
            conn.used = Instant::now();
        }
        Ok(())
    }
}

/// The stores' pool.
pub type Connections = managed::Pool<Manager>;

/// The stores' driver natively: their own pool of sqlx connections.
#[derive(Clone)]
pub struct SqlxDriver {
    connections: Connections,
}

impl SqlxDriver {
    /// The stores' pool, sized and timed as `pool` is and connecting as it does (`pool` itself
    /// stays for migrations and `LISTEN`). Opens no connection until a statement needs one.
    pub fn new(pool: PgPool) -> Result<Self, super::SetupError> {
        let options = pool.options();
        let (max, wait) = (options.get_max_connections() as usize, options.get_acquire_timeout());
        let manager = Manager { options: (*pool.connect_options()).clone() };
        let connections = managed::Pool::builder(manager)
            .max_size(max.max(1))
            .wait_timeout(Some(wait))
            .create_timeout(Some(wait))
            .recycle_timeout(Some(wait))
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| super::SetupError::Connect(e.to_string()))?;
        Ok(Self { connections })
    }

    /// Opens up to `count` connections now (`MinConnections`), so the first statements find
    /// them open; one that cannot be opened is left to the first statement that needs it.
    pub async fn open(&self, count: usize) {
        let opened = futures::future::join_all((0..count).map(|_| self.connections.get())).await;
        drop(opened);
    }

    async fn conn(&self) -> Result<Object<Manager>, StoreError> {
        self.connections.get().await.map_err(|e| match e {
            managed::PoolError::Backend(e) => map_err(e),
            other => StoreError::Unavailable { detail: other.to_string() },
        })
    }
}

fn bind<'q>(query: Query<'q, Postgres, PgArguments>, param: &Param<'q>) -> Query<'q, Postgres, PgArguments> {
    match *param {
        Param::Text(v) => query.bind(v),
        Param::Int(v) => query.bind(v),
        Param::BigInt(v) => query.bind(v),
        Param::Bool(v) => query.bind(v),
        Param::Uuid(v) => query.bind(v),
        Param::Time(v) => query.bind(v),
        Param::Bytes(v) => query.bind(v),
        Param::Json(v) => query.bind(v),
        Param::Texts(v) => query.bind(v),
        Param::Strs(v) => query.bind(v),
        Param::OptTexts(v) => query.bind(v),
        Param::BigInts(v) => query.bind(v),
        Param::Uuids(v) => query.bind(v),
        Param::OptUuids(v) => query.bind(v),
        Param::Times(v) => query.bind(v),
        Param::OptTimes(v) => query.bind(v),
        Param::ByteStrings(v) => query.bind(v),
    }
}

fn statement<'q>(sql: &'static str, params: &[Param<'q>]) -> Query<'q, Postgres, PgArguments> {
    params.iter().fold(sqlx::query(sql), bind)
}

/// A value of column `i`, `NULL` as [`Cell::Null`].
fn cell<'r, T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>>(
    row: &'r PgRow,
    i: usize,
    wrap: impl FnOnce(T) -> Cell,
) -> Result<Cell, StoreError> {
    Ok(row.try_get::<Option<T>, _>(i).map_err(map_err)?.map_or(Cell::Null, wrap))
}

fn cells(row: &PgRow) -> Result<Vec<Cell>, StoreError> {
    row.columns()
        .iter()
        .enumerate()
        .map(|(i, column)| match column.type_info().name() {
            "TEXT" | "VARCHAR" | "NAME" | "BPCHAR" => cell(row, i, Cell::Text),
            "INT2" => cell::<i16>(row, i, |v| Cell::Int(v.into())),
            "INT4" => cell::<i32>(row, i, |v| Cell::Int(v.into())),
            "INT8" => cell::<i64>(row, i, Cell::Int),
            "FLOAT4" => cell::<f32>(row, i, |v| Cell::Float(v.into())),
            "FLOAT8" => cell::<f64>(row, i, Cell::Float),
            "BOOL" => cell(row, i, Cell::Bool),
            "UUID" => cell(row, i, Cell::Uuid),
            "TIMESTAMPTZ" => cell(row, i, Cell::Time),
            "BYTEA" => cell(row, i, Cell::Bytes),
            "JSON" | "JSONB" => cell(row, i, Cell::Json),
            "TEXT[]" | "VARCHAR[]" => cell(row, i, Cell::Texts),
            other => Err(StoreError::Internal {
                detail: format!("column '{}' has a type no store reads: {other}", column.name()),
            }),
        })
        .collect()
}

fn rows(found: Vec<PgRow>) -> Result<Vec<Row>, StoreError> {
    let Some(first) = found.first() else { return Ok(Vec::new()) };
    let columns: Arc<[String]> = first.columns().iter().map(|c| c.name().to_owned()).collect();
    found.iter().map(|r| Ok(Row::new(columns.clone(), cells(r)?))).collect()
}

fn retryable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref().is_some_and(crate::codec::is_retryable_sqlstate))
}

#[async_trait::async_trait]
impl Driver for SqlxDriver {
    async fn query(&self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        let mut attempt = 0;
        loop {
            let mut conn = self.conn().await?;
            conn.settled = false;
            let result = statement(sql, params).fetch_all(&mut conn.raw).await;
            conn.after(&result);
            match result {
                Ok(found) => return rows(found),
                Err(e) if retryable(&e) && attempt + 1 < ATTEMPTS => {
                    drop(conn);
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }

    async fn execute(&self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        let mut attempt = 0;
        loop {
            let mut conn = self.conn().await?;
            conn.settled = false;
            let result = statement(sql, params).execute(&mut conn.raw).await;
            conn.after(&result);
            match result {
                Ok(done) => return Ok(done.rows_affected()),
                Err(e) if retryable(&e) && attempt + 1 < ATTEMPTS => {
                    drop(conn);
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }

    async fn transaction(&self) -> Result<Box<dyn Transaction>, StoreError> {
        let mut conn = self.conn().await?;
        conn.settled = false;
        conn.in_transaction = true;
        let result = sqlx::query("BEGIN").execute(&mut conn.raw).await;
        conn.after(&result);
        result.map_err(map_err)?;
        Ok(Box::new(SqlxTransaction(conn)))
    }
}

/// A transaction on one of the stores' connections: dropped uncommitted, its connection is
/// rolled back before the pool hands it out again.
struct SqlxTransaction(Object<Manager>);

#[async_trait::async_trait]
impl Transaction for SqlxTransaction {
    async fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        self.0.settled = false;
        let result = statement(sql, params).fetch_all(&mut self.0.raw).await;
        self.0.after(&result);
        rows(result.map_err(map_err)?)
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        self.0.settled = false;
        let result = statement(sql, params).execute(&mut self.0.raw).await;
        self.0.after(&result);
        Ok(result.map_err(map_err)?.rows_affected())
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        self.0.settled = false;
        let result = sqlx::query("COMMIT").execute(&mut self.0.raw).await;
        self.0.after(&result);
        result.map_err(map_err)?;
        self.0.in_transaction = false;
        Ok(())
    }
}
