//! The handlers the worker runs: the calculation on the calculation service's queue
//! ([`calculation`]: a Vraag in, an Antwoord or a Fout out, latest version wins) and the
//! collector on the answers' queue ([`collector`]: results stored, latest wins). They
//! share one dialog loop ([`dialog`]: EndDialog, Error, timers, message types outside
//! the contract) and use the worker runtime's [`Handler`](crate::worker::Handler) trait,
//! the engine, the contract, and the back ends' [`PayrollStore`](crate::transport::PayrollStore).

pub mod calculation;
pub mod collector;
pub mod dialog;

/// The pipeline's queues, as the install scripts create them (PostgreSQL names; on SQL
/// Server in schema `dbo`).
pub const REKEN_QUEUE: &str = "loonfactorberekening_reken";
pub const DATA_QUEUE: &str = "loonfactorberekening_data";
