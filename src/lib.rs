//! sbworker: a Service Broker activation worker for payroll recalculation.
//!
//! A roster change in the database sends an XML *Vraag* over a broker queue; sbworker
//! receives it, computes the wage factors and sends back an *Antwoord* or a *Fout*.
//!
//! # Crates
//!
//! The layers are crates, so Cargo enforces what may use what between them; inside a
//! crate, its own layer table holds (`tests/layers.rs` checks it):
//!
//! | crate | what it holds | may use |
//! | --- | --- | --- |
//! | `sbworker-core` (`crates/core`) | the production library: contract, engine, configuration, transport, the two back ends, the worker runtime, the handlers, the hand-off, operations, the selftest | |
//! | `sbworker-tools` (`crates/tools`) | the development tools: the TDS emulator, the bench, the demo, the throwaway PostgreSQL cluster | `sbworker-core` |
//! | `sbworker` (this crate) | the command line (`cli`) and the binary; the tools' subcommands only with the `tools` feature | `sbworker-core`, `sbworker-tools` (feature `tools`) |
//!
//! The modules of both libraries are re-exported here under their own names
//! (`sbworker::contract`, `sbworker::emulator`), so the tests, benches and the fuzz
//! targets name them as one library.

pub mod cli;

pub use sbworker_core::{
    broker, config, connstr, contract, engine, handlers, handoff, ops, pg_tls, selftest, shutdown, sql, transport,
    worker,
};
#[cfg(feature = "tools")]
pub use sbworker_tools::{bench, demo, emulator, pg_cluster, statements as tool_statements};
