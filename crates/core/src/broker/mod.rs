//! The Service Broker back ends: the PostgreSQL broker ([`postgres`]: SQL in
//! `broker/postgres/`, and its session) and the SQL Server transport ([`mssql`]). Both
//! implement the traits of [`crate::transport`] and never use each other. [`Database`]
//! is one connection to either, for the commands an operator or payroll runs.

mod database;
pub mod mssql;
pub mod postgres;

pub use database::Database;
pub(crate) use database::on_database;

pub use crate::transport::{BrokerError, ErrorKind, Message, system};
