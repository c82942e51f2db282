//! sbworker-core: the production library of sbworker, a Service Broker activation
//! worker for payroll recalculation.
//!
//! A roster change in the database sends an XML *Vraag* over a broker queue; the worker
//! receives it, computes the wage factors and sends back an *Antwoord* or a *Fout*. This
//! crate holds everything the `sbworker` binary ships; the development tools (emulator,
//! bench, demo, throwaway cluster) are the `sbworker-tools` crate, which Cargo keeps out
//! of it.
//!
//! # Layers
//!
//! Each module uses only those it lists here. `tests/layers.rs` reads `crates/core/src/`
//! and fails on any other `crate::` edge outside tests, and on a cycle in this table. The
//! broker's two back ends (`broker::postgres`, `broker::mssql`) never use each other.
//!
//! | module | what it holds | may use |
//! | --- | --- | --- |
//! | `sql` | named statements in `.sql` files | |
//! | `connstr` | connection strings (libpq, URL, ADO.NET) parsed; secrets masked from the parse | |
//! | `pg_tls` | TLS for every PostgreSQL connection (libpq's `sslmode`, rustls) | `connstr` |
//! | `shutdown` | the stop signal shared by long-running tasks | |
//! | `contract` | the message contract: typed model, strict decoder, encoder, Fout | |
//! | `engine` | the payroll recalculation: rate tables, holidays, time, wage factors | `contract` |
//! | `config` | the worker's configuration as plain data (TOML, environment, flags) | `contract`, `connstr` |
//! | `transport` | the traits between the worker and a broker, and their shared types | `contract` |
//! | `broker` | the back ends: the PostgreSQL broker and the SQL Server transport; one connection to either for the commands | `transport`, `contract`, `sql`, `connstr`, `pg_tls`, `config` |
//! | `handoff` | the payroll export, the sweep, recompute and the stored results' evidence (explained with the engine) | `sql`, `config`, `broker`, `contract`, `engine` |
//! | `worker` | the runtime: readers, retries, scaling, shutdown, metrics | `transport`, `config`, `shutdown` |
//! | `handlers` | the calculation and the collector | `worker`, `transport`, `contract`, `engine` |
//! | `ops` | `sbworker status`, `sbworker dead-letter` and the web page on either back end | `broker`, `transport`, `contract`, `config`, `sql`, `pg_tls`, `handoff`, `engine` |
//! | `selftest` | `sbworker selftest` on either back end | `handlers`, `handoff`, `broker`, `transport`, `worker`, `contract`, `engine`, `sql`, `connstr`, `pg_tls` |

pub mod broker;
pub mod config;
pub mod connstr;
pub mod contract;
pub mod engine;
pub mod handlers;
pub mod handoff;
pub mod ops;
pub mod pg_tls;
pub mod selftest;
pub mod shutdown;
pub mod sql;
pub mod transport;
pub mod worker;
