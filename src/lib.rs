//! sbworker: a Service Broker activation worker for payroll recalculation.
//!
//! A roster change in the database sends an XML *Vraag* over a broker queue; sbworker
//! receives it, computes the wage factors and sends back an *Antwoord* or a *Fout*.
//!
//! # Layout
//! - [`bench`]: `sbworker bench`, side-by-side measurements against the machine's limit.
//! - [`broker`]: the Service Broker back ends (PostgreSQL broker and its session).
//! - [`cli`]: the subcommands of the `sbworker` binary (thin: read, call, print).
//! - [`contract`]: the message contract: typed model, strict decoder, encoder, Fout.
//! - [`emulator`]: the Service Broker emulator: a TDS front end over the PostgreSQL broker.
//! - [`engine`]: the payroll recalculation: rate tables, holidays, time, wage factors.
//! - [`config`]: the worker's configuration (TOML, environment, flags) and its checks.
//! - [`connstr`]: connection strings (libpq, URL, ADO.NET) parsed; secrets masked from the parse.
//! - [`demo`]: `sbworker demo`, the whole pipeline on a throwaway cluster.
//! - [`handoff`]: the payroll export and the sweep (PostgreSQL).
//! - [`pg_cluster`]: a throwaway PostgreSQL cluster (tests, benchmarks, demo).
//! - [`sql`]: named statements in `.sql` files.
//! - [`transport`]: the seam between the worker and a broker (traits).
//! - [`worker`]: the worker runtime: readers, retries, scaling, shutdown, metrics.

pub mod bench;
pub mod broker;
pub mod cli;
pub mod config;
pub mod connstr;
pub mod contract;
pub mod demo;
pub mod emulator;
pub mod engine;
pub mod handoff;
pub mod pg_cluster;
pub mod selftest;
pub mod sql;
pub mod transport;
pub mod worker;
