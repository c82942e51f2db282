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
