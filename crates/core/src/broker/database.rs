//! One connection to an installation, on either back end, for the commands an operator
//! or payroll runs (`export`, `sweep`, `recompute`, `explain`, `status`, `dead-letter`):
//! [`Database::connect`] opens it from the configuration's broker section, and
//! [`Database::side`] says which side of a split install the database holds. The
//! hand-off's and the operations' back-end traits (`crate::handoff::Backend`,
//! `crate::ops::Backend`) are implemented for each back end's client and for this type,
//! which dispatches to them with [`on_database!`](crate::broker::on_database).

use std::time::Duration;

use super::{BrokerError, ErrorKind};
use crate::config::{BrokerConfig, BrokerKind};
use crate::sql::statements::mssql_install;
use crate::transport::Side;

/// A connection to an installation: a PostgreSQL client, or a SQL Server one.
pub enum Database {
    Postgres(tokio_postgres::Client),
    Mssql(Box<super::mssql::Tds>),
}

/// Runs `$body` with `$b` bound to the back end's own client (`&mut Client` or
/// `&mut Tds`): one line per method where a type dispatches to the back ends.
macro_rules! on_database {
    ($db:expr, $b:ident => $body:expr) => {
        match $db {
            $crate::broker::Database::Postgres($b) => $body,
            $crate::broker::Database::Mssql($b) => {
                let $b: &mut $crate::broker::mssql::Tds = &mut **$b;
                $body
            }
        }
    };
}
pub(crate) use on_database;

impl Database {
    /// Connects as the broker section says. On SQL Server, a statement with no `Command
    /// Timeout` of the string's own may take `long_statements` (a sweep or a large claim
    /// answers only when done; the worker's default is 30 s). Errors show the string
    /// masked, never a driver's reading of it (which can quote a part of a password).
    pub async fn connect(broker: &BrokerConfig, long_statements: Option<Duration>) -> Result<Database, BrokerError> {
        let masked = crate::connstr::mask(&broker.connection);
        let failed = |e: &dyn std::fmt::Display| BrokerError {
            kind: ErrorKind::Connection,
            number: 0,
            message: format!("cannot connect to {masked}: {e}"),
        };
        match broker.kind {
            BrokerKind::Postgres => {
                // The server's own message, or the causes of a connection that failed
                // ("Connection refused"), not only tokio-postgres' top line.
                let (client, conn) = crate::pg_tls::connect(&broker.connection).await.map_err(|e| match e {
                    crate::pg_tls::ConnectError::Connect(e) => failed(&super::postgres::error_of_ref(&e).message),
                    e => failed(&e),
                })?;
                tokio::spawn(conn);
                Ok(Database::Postgres(client))
            }
            BrokerKind::Mssql => {
                let mut c = super::mssql::Connection::parse(&broker.connection).map_err(|e| BrokerError {
                    kind: ErrorKind::Other,
                    number: 0,
                    message: format!("the connection string cannot be used: {e}"),
                })?;
                if let Some(t) = long_statements.filter(|_| !c.command_timeout_given) {
                    c.command_timeout = t;
                }
                let tds = super::mssql::connect(&c).await.map_err(|e| failed(&e.message))?;
                Ok(Database::Mssql(Box::new(tds)))
            }
        }
    }

    /// The side of sbworker the database holds: PostgreSQL's `rekenserver.install_side()`,
    /// SQL Server's `sbworker.side` (02_worker.sql); an install from before sides has
    /// neither and holds both.
    pub async fn side(&mut self) -> Result<Side, BrokerError> {
        match self {
            Database::Postgres(c) => super::postgres::side_of(c).await.map_err(super::postgres::error_of),
            Database::Mssql(t) => {
                let rows = match t.query(mssql_install::SIDE.sql, &[]).await {
                    Ok(s) => s.into_first_result().await.map_err(super::mssql::error_of)?,
                    Err(e) => {
                        let e = super::mssql::error_of(e);
                        // 2812: no such procedure (an install from before sides).
                        return if e.number == 2812 { Ok(Side::Both) } else { Err(e) };
                    }
                };
                // Fails closed: a side that cannot be read is an error, never "both"
                // (which would let the roster's commands at a calculation side).
                let said = rows.first().and_then(|r| r.get::<&str, _>(0)).map(str::to_owned);
                said.as_deref().and_then(|s| s.parse().ok()).ok_or_else(|| BrokerError {
                    kind: ErrorKind::Other,
                    number: 0,
                    message: format!("sbworker.side answered {said:?}, not both, roster or calc"),
                })
            }
        }
    }

    /// The back end's name, for messages.
    pub fn kind(&self) -> BrokerKind {
        match self {
            Database::Postgres(_) => BrokerKind::Postgres,
            Database::Mssql(_) => BrokerKind::Mssql,
        }
    }
}
