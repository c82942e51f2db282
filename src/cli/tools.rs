//! The development tools' subcommands (the `tools` feature): `sbworker demo`, `bench` and
//! `emulator`, each from its flags to the tool's options.

use std::process::ExitCode;

use crate::cli::args::{BenchArgs, DemoArgs, EmulatorArgs};

/// `sbworker demo`: exit 0 when every key holds its latest result.
pub fn demo(a: DemoArgs) -> super::Outcome {
    let opts = crate::demo::Options {
        size: a.size,
        edits: a.edits,
        postgres: a.postgres,
        readers: a.readers.max(1),
        seed: a.seed,
        mssql: a.mssql,
        progress: true,
        external_setup: None,
        pace: None,
        groups_per_transaction: 1,
        collector_groups_per_transaction: crate::demo::COLLECTOR_GROUPS_PER_TRANSACTION,
        dialog_reuse_idle_seconds: a.dialog_reuse_idle_seconds,
        split: a.split.unwrap_or(0),
        calculation: Vec::new(),
    };
    // The workers log errors only (the demo prints its own progress).
    run_logged(async move {
        crate::demo::run(&opts, &mut std::io::stdout()).await?;
        Ok(())
    })
}

/// `sbworker bench` (or `--render` of an earlier run's results).
pub fn bench(a: BenchArgs) -> super::Outcome {
    if let Some(results) = a.render {
        let out = a.out;
        return run_logged(async move { crate::bench::render(&results, &out) });
    }
    let opts = crate::bench::Options {
        quick: a.quick,
        out: a.out,
        reps: a.reps.map(|r| r as usize),
        groups: a.groups,
        per_group: a.per_group,
        skip_peers: a.skip_peers,
        open_loop_seconds: a.open_loop_seconds,
        open_loop_rates: a.open_loop_rates,
        bloat_seconds: a.bloat_seconds,
        groups_per_transaction: a.groups_per_transaction,
        dialog_reuse_idle_seconds: a.dialog_reuse_idle_seconds,
        pipeline_readers: a.pipeline_readers,
        pipeline_employees: a.pipeline_employees.map(|n| n as usize),
        parts: a.parts,
        contenders: a.contenders,
    };
    run_logged(async move {
        crate::bench::run(&opts).await?;
        Ok(())
    })
}

/// `sbworker emulator`: serves until stopped.
pub fn emulator(a: EmulatorArgs) -> super::Outcome {
    let creds = crate::emulator::server::Credentials { user: a.user, password: a.password };
    let faults = crate::emulator::server::Faults::new(None, None, std::time::Duration::from_millis(a.fault_delay_ms));
    faults.set_receive_faults(a.fault_deadlock_every, a.fault_lock_timeout_every, a.fault_drop_every);
    faults.set_commit_deadlock_every(a.fault_commit_deadlock_every);
    faults.set_send_drop_every(a.fault_send_drop_every);
    faults.set_drop_blocked_after(a.fault_drop_blocked_after_ms.map(std::time::Duration::from_millis));
    let browser = a.instance.zip(a.browser);
    super::emulator::run(a.listen, a.postgres, creds, faults, browser, a.tls_cert.zip(a.tls_key))?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `job` on a multi-threaded runtime, logging errors only to stderr (SBWORKER_LOG,
/// a tracing filter, shows more).
fn run_logged(job: impl std::future::Future<Output = anyhow::Result<()>>) -> super::Outcome {
    use super::runtime::{Filter, logging, runtime};
    let (filter, origin) = Filter::from_env("error");
    logging(Filter { filter: &filter, origin }, crate::config::LogFormat::Text)?;
    runtime(true)?.block_on(job)?;
    Ok(ExitCode::SUCCESS)
}
