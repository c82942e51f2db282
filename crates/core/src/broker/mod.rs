//! The Service Broker back ends: the PostgreSQL broker ([`postgres`]: SQL in
//! `broker/postgres/`, and its session) and the SQL Server transport ([`mssql`]). Both
//! implement the traits of [`crate::transport`] and never use each other.

pub mod mssql;
pub mod postgres;

pub use crate::transport::{BrokerError, ErrorKind, Message, system};
