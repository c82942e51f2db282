//! The command line: one module per subcommand, each a thin door to the library.

pub mod args;
pub mod calc;
#[cfg(feature = "tools")]
pub mod emulator;
pub mod handoff;
pub mod install;
pub mod ops;
pub mod run;
pub mod runtime;
pub mod selftest;
#[cfg(feature = "tools")]
pub mod tools;

use std::process::ExitCode;

/// How a subcommand ended: its exit status, or a failure `main` reports as
/// `sbworker <subcommand>: <error and its causes>` with the failure's status.
pub type Outcome = Result<ExitCode, Failure>;

/// A subcommand's failure and its exit status: 1 unless said otherwise (2: the arguments,
/// as clap's; 69: the broker unreachable; 78: the configuration).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Arguments that cannot be used together (exit status 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self { code: 2, error: error.into() }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Self { code: 1, error: error.into() }
    }
}
