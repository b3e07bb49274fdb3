//! The small driver seam every Postgres store is written once over.
//!
//! A store method builds its statement's parameters as [`Param`]s ([`params!`]), runs it
//! through a [`Driver`] — sqlx natively (`crate::pg::SqlxDriver`), tokio-postgres on the
//! Worker — and reads the [`Row`]s that come back by column name. Nothing above this module
//! names a driver type, so both hosts run the same store code, statement for statement.
//!
//! - [`Driver::query`] / [`Driver::execute`]: one statement, one round trip; a
//!   serialization failure or deadlock (SQLSTATE 40001, 40P01) is retried by the driver, since
//!   a single statement that failed that way changed nothing;
//! - [`Driver::transaction`]: several statements that must hold together (the audit chain's
//!   lock, read and append); dropped without [`Transaction::commit`], it rolls back.
//!
//! Errors arrive already mapped by SQLSTATE ([`crate::codec::sqlstate_error`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracon_core::error::StoreError;
use uuid::Uuid;

/// A statement parameter, borrowed from the store call that binds it. Every variant carries
/// its Postgres type, so a `NULL` is typed too.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Text(Option<&'a str>),
    Int(Option<i32>),
    BigInt(Option<i64>),
    Bool(Option<bool>),
    Uuid(Option<Uuid>),
    Time(Option<DateTime<Utc>>),
    Bytes(Option<&'a [u8]>),
    Json(Option<&'a Value>),
    Texts(&'a [String]),
    Strs(&'a [&'a str]),
    OptTexts(&'a [Option<String>]),
    BigInts(&'a [i64]),
    Uuids(&'a [Uuid]),
    OptUuids(&'a [Option<Uuid>]),
    Times(&'a [DateTime<Utc>]),
    OptTimes(&'a [Option<DateTime<Utc>>]),
    ByteStrings(&'a [Vec<u8>]),
}

/// What can be bound as a parameter (see [`params!`]).
pub trait ToParam {
    fn param(&self) -> Param<'_>;
}

macro_rules! to_param {
    ($($t:ty => |$v:ident| $e:expr;)*) => {
        $(impl ToParam for $t {
            fn param(&self) -> Param<'_> {
                let $v = self;
                $e
            }
        })*
    };
}

to_param! {
    str => |v| Param::Text(Some(v));
    String => |v| Param::Text(Some(v));
    Option<&str> => |v| Param::Text(*v);
    Option<String> => |v| Param::Text(v.as_deref());
    i32 => |v| Param::Int(Some(*v));
    Option<i32> => |v| Param::Int(*v);
    i64 => |v| Param::BigInt(Some(*v));
    Option<i64> => |v| Param::BigInt(*v);
    bool => |v| Param::Bool(Some(*v));
    Option<bool> => |v| Param::Bool(*v);
    Uuid => |v| Param::Uuid(Some(*v));
    Option<Uuid> => |v| Param::Uuid(*v);
    DateTime<Utc> => |v| Param::Time(Some(*v));
    Option<DateTime<Utc>> => |v| Param::Time(*v);
    [u8] => |v| Param::Bytes(Some(v));
    Vec<u8> => |v| Param::Bytes(Some(v));
    Option<Vec<u8>> => |v| Param::Bytes(v.as_deref());
    Value => |v| Param::Json(Some(v));
    Option<Value> => |v| Param::Json(v.as_ref());
    Vec<String> => |v| Param::Texts(v);
    Vec<&'static str> => |v| Param::Strs(v);
    Vec<Option<String>> => |v| Param::OptTexts(v);
    Vec<i64> => |v| Param::BigInts(v);
    Vec<Uuid> => |v| Param::Uuids(v);
    Vec<Option<Uuid>> => |v| Param::OptUuids(v);
    Vec<DateTime<Utc>> => |v| Param::Times(v);
    Vec<Option<DateTime<Utc>>> => |v| Param::OptTimes(v);
    Vec<Vec<u8>> => |v| Param::ByteStrings(v);
}

impl ToParam for tracon_core::names::TenantId {
    fn param(&self) -> Param<'_> {
        Param::Text(Some(self.as_str()))
    }
}

impl ToParam for tracon_core::names::RunId {
    fn param(&self) -> Param<'_> {
        Param::Uuid(Some(self.0))
    }
}

impl<T: ToParam + ?Sized> ToParam for &T {
    fn param(&self) -> Param<'_> {
        (**self).param()
    }
}

/// `params![a, b, c]`: the statement's `$1, $2, $3`, each by reference.
#[macro_export]
macro_rules! params {
    ($($p:expr),* $(,)?) => {
        [$($crate::driver::ToParam::param(&$p)),*]
    };
}

/// `columns!(row, KeyColumns [id tenant_id name])`: the struct with each field read from the
/// row's column of the same name (`KeyColumns { id: row.get("id")?, … }`), in a function that
/// returns `Result<_, StoreError>`.
#[macro_export]
macro_rules! columns {
    ($row:expr, $ty:ident [$($field:ident)*]) => {
        $ty { $($field: $row.get(stringify!($field))?),* }
    };
}

/// One column's value, decoded by its Postgres type.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Uuid(Uuid),
    Time(DateTime<Utc>),
    Bytes(Vec<u8>),
    Json(Value),
    Texts(Vec<String>),
}

/// One result row: its cells, named by the statement's columns.
#[derive(Debug, Clone)]
pub struct Row {
    columns: Arc<[String]>,
    cells: Vec<Cell>,
}

impl Row {
    /// A row of `cells` under `columns` (what a driver builds).
    pub fn new(columns: Arc<[String]>, cells: Vec<Cell>) -> Self {
        Self { columns, cells }
    }

    /// The named column as `T`; a missing column or a value of another type is a store
    /// failure (the schema is not what this code expects).
    pub fn get<T: FromCell>(&self, column: &str) -> Result<T, StoreError> {
        let at = self
            .columns
            .iter()
            .position(|c| c == column)
            .ok_or_else(|| StoreError::Internal { detail: format!("the result has no column '{column}'") })?;
        let cell = self.cells.get(at).unwrap_or(&Cell::Null);
        T::from_cell(cell).ok_or_else(|| StoreError::Internal {
            detail: format!("column '{column}' holds {cell:?}, not a {}", std::any::type_name::<T>()),
        })
    }

    /// The first column as `T` (a one-column result).
    pub fn first<T: FromCell>(&self) -> Result<T, StoreError> {
        let name = self.columns.first().cloned().unwrap_or_default();
        self.get(&name)
    }
}

/// A value a [`Cell`] decodes to.
pub trait FromCell: Sized {
    fn from_cell(cell: &Cell) -> Option<Self>;
}

macro_rules! from_cell {
    ($($t:ty => |$c:ident| $e:expr;)*) => {
        $(impl FromCell for $t {
            fn from_cell($c: &Cell) -> Option<Self> {
                $e
            }
        }
        impl FromCell for Option<$t> {
            fn from_cell(cell: &Cell) -> Option<Self> {
                match cell {
                    Cell::Null => Some(None),
                    other => <$t>::from_cell(other).map(Some),
                }
            }
        })*
    };
}

from_cell! {
    String => |c| match c { Cell::Text(s) => Some(s.clone()), _ => None };
    i64 => |c| match c { Cell::Int(n) => Some(*n), _ => None };
    i32 => |c| match c { Cell::Int(n) => i32::try_from(*n).ok(), _ => None };
    f64 => |c| match c { Cell::Float(f) => Some(*f), Cell::Int(n) => Some(*n as f64), _ => None };
    bool => |c| match c { Cell::Bool(b) => Some(*b), _ => None };
    Uuid => |c| match c { Cell::Uuid(u) => Some(*u), _ => None };
    DateTime<Utc> => |c| match c { Cell::Time(t) => Some(*t), _ => None };
    Vec<u8> => |c| match c { Cell::Bytes(b) => Some(b.clone()), _ => None };
    Value => |c| match c { Cell::Json(v) => Some(v.clone()), _ => None };
    Vec<String> => |c| match c { Cell::Texts(v) => Some(v.clone()), _ => None };
}

/// A Postgres connection pool as the stores use it.
#[async_trait::async_trait]
pub trait Driver: Send + Sync {
    /// Runs one statement and returns its rows.
    async fn query(&self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError>;
    /// Runs one statement and returns how many rows it affected.
    async fn execute(&self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError>;
    /// Opens a transaction on one connection.
    async fn transaction(&self) -> Result<Box<dyn Transaction>, StoreError>;

    /// At most one row (`None` for none).
    async fn query_opt(&self, sql: &'static str, params: &[Param<'_>]) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Exactly one row.
    async fn query_one(&self, sql: &'static str, params: &[Param<'_>]) -> Result<Row, StoreError> {
        self.query_opt(sql, params)
            .await?
            .ok_or_else(|| StoreError::Internal { detail: "a statement that returns one row returned none".into() })
    }
}

/// Statements on one connection inside `BEGIN`; dropped without [`Self::commit`], it rolls
/// back (the connection ends it, or returns to its pool rolled back).
#[async_trait::async_trait]
pub trait Transaction: Send {
    async fn query(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<Vec<Row>, StoreError>;
    async fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError>;
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// How many times a driver runs a statement that failed with a serialization failure or a
/// deadlock, in all.
pub const ATTEMPTS: u32 = 5;

/// The pause before attempt `attempt + 1` (5 ms doubling).
pub fn backoff(attempt: u32) -> std::time::Duration {
    std::time::Duration::from_millis(5 * 2u64.pow(attempt.min(8)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_by_column_name_and_refuse_the_wrong_type() {
        let columns: Arc<[String]> = vec!["id".to_owned(), "n".to_owned(), "note".to_owned()].into();
        let id = Uuid::from_u128(7);
        let row = Row::new(columns, vec![Cell::Uuid(id), Cell::Int(3), Cell::Null]);
        assert_eq!(row.get::<Uuid>("id").unwrap(), id);
        assert_eq!(row.get::<i64>("n").unwrap(), 3);
        assert_eq!(row.get::<i32>("n").unwrap(), 3);
        assert_eq!(row.get::<Option<String>>("note").unwrap(), None);
        assert!(row.get::<String>("note").is_err(), "NULL is not a string");
        assert!(row.get::<String>("n").is_err());
        assert!(row.get::<i64>("missing").is_err());
        assert_eq!(row.first::<Uuid>().unwrap(), id);
    }

    #[test]
    fn params_borrow_what_they_bind_with_its_type() {
        let (name, none, n, bytes) = ("a".to_owned(), None::<String>, 5i64, vec![1u8, 2]);
        let p = params![name, none, n, bytes, "lit"];
        assert!(matches!(p[0], Param::Text(Some("a"))));
        assert!(matches!(p[1], Param::Text(None)));
        assert!(matches!(p[2], Param::BigInt(Some(5))));
        assert!(matches!(p[3], Param::Bytes(Some([1, 2]))));
        assert!(matches!(p[4], Param::Text(Some("lit"))));
    }
}
