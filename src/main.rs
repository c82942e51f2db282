//! The `sbworker` binary: parses the command line ([`sbworker::cli::args`]) and hands
//! over to the library.

use std::process::ExitCode;

use clap::Parser;
use sbworker::cli;
use sbworker::cli::args::{Args, Command, FormatArg, ModeArg};
use sbworker::contract::Limits;

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
    let args = Args::parse();
    match args.command {
        Command::Run { flags } => {
            let config = match flags.load(cli::run::HANDLERS) {
                Ok(c) => c,
                Err(code) => return code,
            };
            report_run(cli::run::run(config))
        }
        #[cfg(feature = "tools")]
        Command::BenchWorker { flags } => {
            let config = match flags.load(sbworker::bench::effect::HANDLERS) {
                Ok(c) => c,
                Err(code) => return code,
            };
            report_run(cli::run::run_for_bench(config))
        }
        Command::CheckConfig { flags } => {
            let config = match flags.load(cli::run::HANDLERS) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match cli::run::check(&config) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sbworker: configuration error: {e:#}");
                    ExitCode::from(cli::run::EXIT_CONFIG)
                }
            }
        }
        #[cfg(feature = "tools")]
        Command::Demo { size, edits, readers, postgres, seed, mssql, dialog_reuse_idle_seconds, split } => {
            let opts = sbworker::demo::Options {
                size,
                edits,
                postgres,
                readers: readers.max(1),
                seed,
                mssql,
                progress: true,
                external_setup: None,
                pace: None,
                groups_per_transaction: 1,
                dialog_reuse_idle_seconds,
                split: split.unwrap_or(0),
                calculation: Vec::new(),
            };
            // The workers log errors only (the demo prints its own progress).
            run_logged("demo", async move {
                sbworker::demo::run(&opts, &mut std::io::stdout()).await?;
                Ok(())
            })
        }
        Command::Export { database, periode, format, mode, lease_minutes, out, ack } => {
            let target = match database.target() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sbworker export: {e}");
                    return ExitCode::from(2);
                }
            };
            let result = match (ack, periode) {
                (Some(batch), _) => cli::handoff::ack(&target, batch),
                (None, Some(periode)) => {
                    let format = match format {
                        FormatArg::Csv => cli::handoff::Format::Csv,
                        FormatArg::Json => cli::handoff::Format::Json,
                    };
                    let mode = match mode {
                        ModeArg::Once => sbworker::handoff::export::Mode::Once,
                        ModeArg::Lease => sbworker::handoff::export::Mode::Lease { seconds: lease_minutes * 60.0 },
                    };
                    cli::handoff::export(&target, periode, format, mode, out.as_deref())
                }
                (None, None) => Err(anyhow::anyhow!("give --periode ID or --ack BATCH_ID")),
            };
            match result {
                Ok(line) => {
                    eprintln!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sbworker export: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Sweep { database, fuse, batch, retention_days, evidence_retention_months, delete_batch } => {
            let opts = sbworker::handoff::sweep::Options {
                fuse,
                batch,
                retention_days,
                evidence_retention_months,
                delete_batch,
            };
            let target = match database.target() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sbworker sweep: {e}");
                    return ExitCode::from(2);
                }
            };
            match cli::handoff::sweep(&target, opts) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sbworker sweep: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Explain { database, dienstverband, periode, versie, tables, json } => {
            let target = match database.target() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sbworker explain: {e}");
                    return ExitCode::from(2);
                }
            };
            match cli::handoff::explain(&target, dienstverband, periode, versie, tables.as_deref(), json) {
                Ok(text) => {
                    println!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sbworker explain: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Recompute {
            database,
            periodes,
            cao,
            dienstverband_van,
            dienstverband_tot,
            sleutels,
            all,
            after,
            batch,
            fuse,
            dry_run,
        } => {
            let selection = sbworker::handoff::recompute::Selection {
                periodes,
                cao,
                dienstverband_from: dienstverband_van,
                dienstverband_to: dienstverband_tot,
                keys: sleutels,
                after,
            };
            if selection.is_everything() && !all {
                eprintln!(
                    "sbworker recompute: choose the keys (--periode, --cao, --dienstverband-van/-tot, --sleutel), or --all for every key"
                );
                return ExitCode::from(2);
            }
            let target = match database.target() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sbworker recompute: {e}");
                    return ExitCode::from(2);
                }
            };
            let opts = sbworker::handoff::recompute::Options { batch, fuse, dry_run };
            match cli::handoff::recompute(&target, &selection, opts) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sbworker recompute: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
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
        #[cfg(feature = "tools")]
        Command::Bench {
            quick,
            out,
            reps,
            groups,
            per_group,
            skip_peers,
            open_loop_seconds,
            open_loop_rates,
            bloat_seconds,
            groups_per_transaction,
            dialog_reuse_idle_seconds,
            pipeline_readers,
            pipeline_employees,
            parts,
            contenders,
            render,
        } => {
            if let Some(results) = render {
                return run_logged("bench", async move { sbworker::bench::render(&results, &out) });
            }
            let opts = sbworker::bench::Options {
                quick,
                out,
                reps: reps.map(|r| r as usize),
                groups,
                per_group,
                skip_peers,
                open_loop_seconds,
                open_loop_rates,
                bloat_seconds,
                groups_per_transaction,
                dialog_reuse_idle_seconds,
                pipeline_readers,
                pipeline_employees: pipeline_employees.map(|n| n as usize),
                parts,
                contenders,
            };
            run_logged("bench", async move {
                sbworker::bench::run(&opts).await?;
                Ok(())
            })
        }
        #[cfg(feature = "tools")]
        Command::Emulator {
            listen,
            postgres,
            user,
            password,
            fault_deadlock_every,
            fault_drop_every,
            fault_lock_timeout_every,
            fault_commit_deadlock_every,
            fault_send_drop_every,
            fault_drop_blocked_after_ms,
            fault_delay_ms,
            instance,
            browser,
            tls_cert,
            tls_key,
        } => {
            let creds = sbworker::emulator::server::Credentials { user, password };
            let faults =
                sbworker::emulator::server::Faults::new(None, None, std::time::Duration::from_millis(fault_delay_ms));
            faults.set_receive_faults(fault_deadlock_every, fault_lock_timeout_every, fault_drop_every);
            faults.set_commit_deadlock_every(fault_commit_deadlock_every);
            faults.set_send_drop_every(fault_send_drop_every);
            faults.set_drop_blocked_after(fault_drop_blocked_after_ms.map(std::time::Duration::from_millis));
            let browser = instance.zip(browser);
            match cli::emulator::run(listen, postgres, creds, faults, browser, tls_cert.zip(tls_key)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sbworker emulator: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Install { postgres, roster, mssql, vars, side, allow_older_workers, roles } => match (postgres, mssql)
        {
            (Some(url), _) => {
                report_install(cli::install::postgres(&url, roster, side, allow_older_workers, &roles.grants()))
            }
            (None, Some(conn)) => {
                report_install(cli::install::mssql(&conn, &vars, side, allow_older_workers, &roles.grants()))
            }
            (None, None) => report_install(Err(anyhow::anyhow!("give --postgres URL or --mssql CONN"))),
        },
        Command::Selftest { postgres, mssql, json, deep, admin, side } => {
            cli::selftest::run(postgres, mssql, json, deep.then_some(admin), side.unwrap_or_default())
        }
        Command::Status { flags, json, watch, stale_minutes, recent_minutes, silent_seconds } => {
            let config = match flags.load(cli::run::HANDLERS) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let o = cli::ops::StatusOptions { json, watch, stale_minutes, recent_minutes, silent_seconds };
            cli::ops::status(&config, o)
        }
        Command::DeadLetter { flags, action } => {
            let config = match flags.load(cli::run::HANDLERS) {
                Ok(c) => c,
                Err(code) => return code,
            };
            cli::ops::dead_letters(&config, action)
        }
        Command::Link { roster, calc } => match cli::install::link(&roster, &calc) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sbworker link: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

fn report_run(r: anyhow::Result<sbworker::worker::RunOutcome>) -> ExitCode {
    match r {
        Ok(sbworker::worker::RunOutcome::Drained) => ExitCode::SUCCESS,
        Ok(sbworker::worker::RunOutcome::Aborted { reason }) => {
            eprintln!("sbworker run: aborted ({reason}); uncommitted groups were rolled back");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("sbworker run: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn report_install(r: anyhow::Result<String>) -> ExitCode {
    match r {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sbworker install: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs `job` on a multi-threaded runtime, logging errors only to stderr (SBWORKER_LOG,
/// a tracing filter, shows more): exit 0, or 1 with the error.
#[cfg(feature = "tools")]
fn run_logged(name: &str, job: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let run = || -> anyhow::Result<()> {
        use cli::runtime::{Filter, logging, runtime};
        let (filter, origin) = Filter::from_env("error");
        logging(Filter { filter: &filter, origin }, sbworker::config::LogFormat::Text)?;
        runtime(true)?.block_on(job)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbworker {name}: {e:#}");
            ExitCode::from(1)
        }
    }
}
