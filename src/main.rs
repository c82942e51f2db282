//! The `sbworker` binary: parses the command line and hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sbworker::cli;
use sbworker::contract::Limits;

#[derive(Parser)]
#[command(name = "sbworker", version, about = "Service Broker worker for payroll recalculation")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute the wage factors of one Vraag: the Antwoord on stdout (exit 0), or a
    /// RekenserverFout on stdout and the reason on stderr (exit 2).
    #[command(after_help = "Examples:\n  \
        sbworker calc schemas/examples/valid/vraag-voorbeeld2.xml\n  \
        sbworker calc --explain schemas/examples/valid/vraag-voorbeeld1.xml\n  \
        cat vraag.xml | sbworker calc -")]
    Calc {
        /// The Vraag XML (UTF-8 or UTF-16), or - for standard input.
        file: String,
        /// Explain on stderr which minutes fell into which rate, and why.
        #[arg(long)]
        explain: bool,
        /// Rate tables (TOML) instead of the built-in ones (data/cao.toml).
        #[arg(long, value_name = "FILE")]
        tables: Option<PathBuf>,
        /// Largest Vraag accepted, in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_body_bytes)]
        max_body_bytes: usize,
    },
    /// Install the broker scripts into a database (idempotent: re-running changes nothing).
    #[command(after_help = "Examples:\n  \
        sbworker install --postgres 'host=localhost user=payroll dbname=roster'\n  \
        sbworker install --postgres postgresql://payroll@db.example/roster")]
    Install {
        /// A PostgreSQL connection string (URL or key=value form).
        #[arg(long, value_name = "URL")]
        postgres: String,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Install { postgres } => match cli::install::postgres(&postgres) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sbworker install: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Calc { file, explain, tables, max_body_bytes } => {
            let tables = match cli::calc::load_tables(tables.as_deref()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sbworker calc: {e:#}");
                    return ExitCode::from(1);
                }
            };
            let input = match cli::calc::read_input(&file) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("sbworker calc: cannot read {file}: {e}");
                    return ExitCode::from(1);
                }
            };
            let limits = Limits { max_body_bytes, ..Limits::default() };
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            match cli::calc::run(&input, &limits, &tables, explain, &mut out, &mut err) {
                Ok(cli::calc::Outcome::Antwoord) => ExitCode::SUCCESS,
                Ok(cli::calc::Outcome::Fout) => ExitCode::from(2),
                Err(e) => {
                    eprintln!("sbworker calc: cannot write the answer: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
