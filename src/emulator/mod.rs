//! The Service Broker emulator (issue 9): a TDS front end over the PostgreSQL broker.
//! What exists so far is its T-SQL recogniser ([`tsql`]): the Service Broker statement
//! set in the syntax of the Microsoft documentation, parsed into statements the
//! emulator will run on the PostgreSQL broker. The TDS server itself is not written yet.

pub mod codec;
pub mod server;
pub mod tsql;
