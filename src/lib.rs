//! sbworker: a Service Broker activation worker for payroll recalculation.
//!
//! A roster change in the database sends an XML *Vraag* over a broker queue; sbworker
//! receives it, computes the wage factors and sends back an *Antwoord* or a *Fout*.
//!
//! # Layout
//! - [`broker`]: the Service Broker back ends (PostgreSQL broker and its session).
//! - [`cli`]: the subcommands of the `sbworker` binary (thin: read, call, print).
//! - [`contract`]: the message contract: typed model, strict decoder, encoder, Fout.
//! - [`engine`]: the payroll recalculation: rate tables, holidays, time, wage factors.
//! - [`pg_cluster`]: a throwaway PostgreSQL cluster (tests, benchmarks, demo).

pub mod broker;
pub mod cli;
pub mod config;
pub mod contract;
pub mod engine;
pub mod pg_cluster;
pub mod transport;
pub mod worker;
