//! The `sbworker` binary: parses the command line ([`sbworker::cli::args`]), hands each
//! subcommand to its module in [`sbworker::cli`], and reports a failure in one place.

use std::process::ExitCode;

use clap::Parser;
use sbworker::cli::args::{Args, Command};
use sbworker::cli::{self, Outcome};

/// The development tools' subcommands, which a build without the `tools` feature (the
/// shipped worker) does not have.
#[cfg(not(feature = "tools"))]
const TOOLS: [&str; 4] = ["demo", "emulator", "bench", "bench-worker"];

fn main() -> ExitCode {
    #[cfg(not(feature = "tools"))]
    if let Some(tool) =
        std::env::args_os().nth(1).and_then(|a| a.into_string().ok()).filter(|a| TOOLS.contains(&a.as_str()))
    {
        eprintln!(
            "sbworker: `{tool}` is a development tool, not in this build of the worker.\n\
             From the repository: cargo run --release --features tools -- {tool}"
        );
        return ExitCode::from(2);
    }
    let command = Args::parse().command;
    let name = command.name();
    match try_main(command) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("sbworker {name}: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

fn try_main(command: Command) -> Outcome {
    match command {
        Command::Calc(a) => cli::calc::main(a),
        Command::Run(a) => cli::run::main(a),
        Command::CheckConfig(a) => cli::run::main_check_config(a),
        Command::Export(a) => cli::handoff::main_export(a),
        Command::Sweep(a) => cli::handoff::main_sweep(a),
        Command::Explain(a) => cli::handoff::main_explain(a),
        Command::Recompute(a) => cli::handoff::main_recompute(a),
        Command::Install(a) => cli::install::main(a),
        Command::Link(a) => cli::install::main_link(a),
        Command::Selftest(a) => cli::selftest::main(a),
        Command::Status(a) => cli::ops::main_status(a),
        Command::Web(a) => cli::ops::main_web(a),
        Command::DeadLetter(a) => cli::ops::main_dead_letter(a),
        #[cfg(feature = "tools")]
        Command::BenchWorker(a) => cli::run::main_bench_worker(a),
        #[cfg(feature = "tools")]
        Command::Demo(a) => cli::tools::demo(a),
        #[cfg(feature = "tools")]
        Command::Bench(a) => cli::tools::bench(a),
        #[cfg(feature = "tools")]
        Command::Emulator(a) => cli::tools::emulator(a),
    }
}
