//! The Service Broker emulator: a TDS 7.4 front end ([`server`], over the wire
//! format in [`codec`]) that runs the Service Broker statements it recognises ([`tsql`])
//! on the PostgreSQL broker, so the SQL Server transport meets a real peer over TCP.

pub mod browser;
pub mod codec;
pub mod fuzz;
pub mod server;
pub mod tsql;
