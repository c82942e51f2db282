//! sbworker-tools: the development tools of sbworker, on top of `sbworker-core`: the
//! TDS emulator (SQL Server's front end over the PostgreSQL broker), the bench, the demo
//! and the throwaway PostgreSQL cluster the tests, the bench and the demo start. The
//! `sbworker` binary has them only when built with its `tools` feature; its `.deb` and
//! `cargo install` do not.
//!
//! # Layers
//!
//! Each module uses only those it lists here (and `statements`, this crate's own named
//! SQL); `tests/layers.rs` checks it as it checks the core's table. The names in the last
//! column that are not rows here are `sbworker-core`'s modules, reached through the
//! `use` below so the paths read as they do in the core.
//!
//! | module | what it holds | may use |
//! | --- | --- | --- |
//! | `pg_cluster` | a throwaway PostgreSQL cluster (tests, benchmarks, demo) | `sql` |
//! | `emulator` | a TDS front end over the PostgreSQL broker | `broker`, `transport`, `contract`, `sql`, `shutdown`, `handoff` |
//! | `demo` | `sbworker demo`, the whole pipeline on a throwaway cluster | `emulator`, `handlers`, `broker`, `transport`, `worker`, `config`, `contract`, `engine`, `sql`, `pg_cluster`, `pg_tls` |
//! | `bench` | `sbworker bench`, side-by-side measurements | `demo`, `handlers`, `broker`, `transport`, `worker`, `contract`, `engine`, `sql`, `pg_cluster`, `pg_tls`, `ops`, `config`, `shutdown` |

pub mod bench;
pub mod demo;
pub mod emulator;
pub mod pg_cluster;

pub(crate) use sbworker_core::{
    broker, config, contract, engine, handlers, handoff, ops, pg_tls, shutdown, sql, transport, worker,
};

/// The tools' own named statements (`crates/tools/sql/*/statements/*.sql`), generated
/// by the build script as `sbworker-core`'s `sql::statements` are.
pub mod statements {
    use sbworker_core::sql::Named as Statement;
    include!(concat!(env!("OUT_DIR"), "/statements.rs"));
}
