//! [`Driver`] on sqlx: a pool, statements bound from [`Param`]s, rows decoded into [`Cell`]s
//! by their column types.

use std::sync::Arc;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Column, PgPool, Postgres, Row as _, TypeInfo};
use tracon_core::error::StoreError;

use super::map_err;
use crate::driver::{ATTEMPTS, Cell, Driver, Param, Row, Transaction, backoff};

/// The stores' driver natively: a sqlx pool.
#[derive(Clone)]
pub struct SqlxDriver {
    pool: PgPool,
}

impl SqlxDriver {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
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
            match statement(sql, params).fetch_all(&self.pool).await {
                Ok(found) => return rows(found),
                Err(e) if retryable(&e) && attempt + 1 < ATTEMPTS => {
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
            match statement(sql, params).execute(&self.pool).await {
                Ok(done) => return Ok(done.rows_affected()),
                Err(e) if retryable(&e) && attempt + 1 < ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }

    async fn transaction(&self) -> Result<Box<dyn Transaction>, StoreError> {
        Ok(Box::new(SqlxTransaction(self.pool.begin().await.map_err(map_err)?)))
    }
}

/// sqlx's transaction: dropped uncommitted, it rolls back before its connection returns to
/// the pool.
struct SqlxTransaction(sqlx::Transaction<'static, Postgres>);

#[async_trait::async_trait]
impl Transaction for SqlxTransaction {
    async fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError> {
        rows(statement(sql, params).fetch_all(&mut *self.0).await.map_err(map_err)?)
    }

    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        Ok(statement(sql, params).execute(&mut *self.0).await.map_err(map_err)?.rows_affected())
    }

    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.0.commit().await.map_err(map_err)
    }
}
