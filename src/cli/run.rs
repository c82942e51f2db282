//! `sbworker run` and `sbworker check-config`: read the configuration (file, then
//! `SBWORKER__…` environment, then flags), set up logging, and run the worker until
//! SIGTERM or SIGINT.

use std::sync::Arc;

use anyhow::Context;
use tokio::sync::mpsc;
use tracing::info;

use crate::broker::mssql::MssqlTransport;
use crate::broker::postgres::PostgresTransport;
use crate::config::{BrokerKind, Config, ConfigError};
use crate::contract::Limits;
use crate::handlers::{calculation, collector};
use crate::transport::Transport;
use crate::worker::{self, Handlers, Metrics, RunOutcome};

/// Exit code of a configuration that cannot be used (sysexits' EX_CONFIG).
pub const EXIT_CONFIG: u8 = 78;

/// What the configuration's owners check of their parts (the plain values are checked
/// by the configuration itself): the SQL Server transport its connection string and the
/// queues' waits against its Command Timeout.
pub fn check_owned_parts(config: &Config) -> Result<(), ConfigError> {
    let key = |key: String, problem: String| ConfigError::Key { key, problem };
    for (conn, names) in config.queues_by_connection() {
        let conn_key = connection_key(config, &conn, &names);
        if config.broker.kind == BrokerKind::Postgres {
            // The TLS keys (sslmode, sslrootcert, sslcert, sslkey) as sbworker reads them;
            // the files themselves are read when the worker starts (and again when they
            // change: pg_tls::Endpoint).
            crate::pg_tls::config(&conn).map_err(|e| key(conn_key.clone(), e.to_string()))?;
        }
        if config.broker.kind == BrokerKind::Mssql {
            let waits: Vec<(String, u64)> =
                names.iter().map(|name| (format!("queues.{name}.wait_ms"), config.queues[name].wait_ms)).collect();
            // (A connection string it cannot read is named by the key it was given by.)
            crate::broker::mssql::check_waits(&conn, &waits)
                .map_err(|(k, p)| key(if k == "broker.connection" { conn_key.clone() } else { k }, p))?;
        }
    }
    Ok(())
}

/// The key a database's connection string was given by: `broker.connection`, or the
/// `connection` of the first of its queues that names it.
fn connection_key(config: &Config, conn: &str, names: &[String]) -> String {
    if conn == config.broker.connection {
        return "broker.connection".into();
    }
    names
        .iter()
        .find(|n| config.queues[*n].connection.as_deref() == Some(conn))
        .map_or_else(|| "broker.connection".into(), |n| format!("queues.{n}.connection"))
}

/// `check-config`: the effective configuration with secrets masked, after checking it
/// and its rate tables.
pub fn check(config: &Config) -> anyhow::Result<String> {
    super::calc::load_tables(config.engine.tables.as_deref()).context("engine.tables")?;
    let mut tls = String::new();
    if config.broker.kind == BrokerKind::Postgres {
        // Each database's: [broker]'s, and any a queue names of its own.
        let mut databases = vec![("broker.connection".to_owned(), config.broker.connection.clone())];
        for (conn, names) in config.queues_by_connection() {
            let key = connection_key(config, &conn, &names);
            if conn != config.broker.connection {
                databases.push((key, conn));
            }
        }
        for (key, conn) in databases {
            let (_, t) = crate::pg_tls::config(&conn).with_context(|| key.clone())?;
            // The certificate files are read now, so a wrong path shows here.
            t.connector().with_context(|| key.clone())?;
            let which = if key == "broker.connection" { String::new() } else { format!(" ({key})") };
            tls.push_str(&format!("# PostgreSQL TLS{which}: {}\n", t.describe()));
        }
    }
    Ok(format!("# sbworker: configuration is valid (secrets masked)\n{tls}{}", config.to_masked_toml()))
}

fn init_logging(config: &Config) -> anyhow::Result<()> {
    // A second set-up (tests run several workers in one process) keeps the first.
    super::runtime::logging(
        super::runtime::Filter { filter: &config.log.level, origin: "log.level" },
        config.log.format,
    )
}

/// The handlers `sbworker run` serves, by the name a queue's `handler` key uses.
pub const HANDLERS: &[&str] = &[calculation::NAME, collector::NAME];

/// The production handlers, for a back end's session.
fn handlers<S: crate::transport::PayrollStore>(
    tables: Arc<crate::engine::Tables>,
    limits: Limits,
    rekenversie: bool,
) -> Handlers<S> {
    let calculation = calculation::Calculation::new(tables, limits);
    let calculation = if rekenversie { calculation } else { calculation.without_rekenversie() };
    Handlers::default()
        .with(calculation::NAME, Arc::new(calculation))
        .with(collector::NAME, Arc::new(collector::Collector::new(limits)))
}

/// Runs the worker until SIGTERM/SIGINT (twice, or past the grace period: abort).
/// Returns whether every group in flight was committed.
pub fn run(config: Config) -> anyhow::Result<RunOutcome> {
    run_serving(config, false)
}

/// [`run`], serving the bench's handlers as well (`sbworker bench`'s worker processes:
/// the hidden `bench-worker` subcommand; the bench registers them).
#[cfg(feature = "tools")]
pub fn run_for_bench(config: Config) -> anyhow::Result<RunOutcome> {
    run_serving(config, true)
}

fn run_serving(config: Config, bench: bool) -> anyhow::Result<RunOutcome> {
    // Without the tools there are no bench handlers to serve.
    #[cfg(not(feature = "tools"))]
    let _ = bench;
    init_logging(&config)?;
    let tables = Arc::new(super::calc::load_tables(config.engine.tables.as_deref()).context("engine.tables")?);
    // A table not checked against its CAO's text says so once, at start-up.
    for cao in tables.caos.iter() {
        if let Some(why) = &cao.unverified {
            tracing::warn!(cao = %cao.code, "the rate table of CAO {} is not checked against its text: {why}", cao.code);
        }
    }
    let limits = Limits { max_body_bytes: config.engine.max_body_bytes, ..Limits::default() };
    let rt = super::runtime::runtime(true)?;
    // Resolved once, here: the worker's settings, and the database it talks to (the
    // connection string parsed and its TLS connector built for every connection).
    let settings = worker::Settings::from_config(&config);
    let rekenversie = config.engine.rekenversie;
    let sweep = (config.sweep.interval_ms > 0 && config.broker.kind == BrokerKind::Postgres).then(|| Sweeping {
        every: std::time::Duration::from_millis(config.sweep.interval_ms),
        opts: crate::handoff::sweep::Options::from(&config.sweep),
    });
    // The databases the queues are in: [broker]'s, and any a queue names of its own.
    let databases: Vec<(String, String, Vec<String>)> = config
        .queues_by_connection()
        .into_iter()
        .map(|(conn, names)| (connection_key(&config, &conn, &names), conn, names))
        .collect();
    rt.block_on(async move {
        match config.broker.kind {
            BrokerKind::Postgres => {
                let mut parts = Vec::new();
                for (key, conn, names) in &databases {
                    let at = crate::pg_tls::Endpoint::new(conn).with_context(|| key.clone())?;
                    parts.push((key.clone(), PostgresTransport::at(at), names.clone()));
                }
                let sweeper = match sweep {
                    Some(s) => {
                        Some((crate::pg_tls::Endpoint::new(&config.broker.connection).context("broker.connection")?, s))
                    }
                    None => None,
                };
                let h = handlers(tables, limits, rekenversie);
                #[cfg(feature = "tools")]
                let h = if bench { crate::bench::effect::register(h) } else { h };
                serve(parts, &settings, sweeper, h).await
            }
            BrokerKind::Mssql => {
                let mut parts = Vec::new();
                for (key, conn, names) in &databases {
                    parts.push((key.clone(), MssqlTransport::new(conn).with_context(|| key.clone())?, names.clone()));
                }
                let h = handlers(tables, limits, rekenversie);
                #[cfg(feature = "tools")]
                let h = if bench { crate::bench::effect::register(h) } else { h };
                serve(parts, &settings, None, h).await
            }
        }
    })
}

/// The sweep a PostgreSQL worker runs in-process (`sweep.interval_ms` above 0).
struct Sweeping {
    every: std::time::Duration,
    opts: crate::handoff::sweep::Options,
}

/// Serves each database's queues (`parts`: a transport and the names of its queues) with
/// one worker run each, all in this process: one stop signal stops them all, one HTTP
/// endpoint serves the metrics they share, each database gets its own heartbeat.
async fn serve<T: Transport>(
    parts: Vec<(String, T, Vec<String>)>,
    settings: &worker::Settings,
    sweep: Option<(crate::pg_tls::Endpoint, Sweeping)>,
    handlers: Handlers<T::Session>,
) -> anyhow::Result<RunOutcome> {
    use futures_util::StreamExt;
    for (key, transport, names) in &parts {
        worker::preflight(transport, &settings.only(names)).await.with_context(|| format!("the database of {key}"))?;
    }
    // Installed before the workers start (and log that they have), so a signal sent as
    // soon as the log line appears is a stop request, not the default action (exit).
    let signals = install_signal_handlers()?;
    let metrics = Arc::new(Metrics::new());
    let mut stops = Vec::new();
    let runs = futures_util::stream::FuturesUnordered::new();
    for (i, (_, transport, names)) in parts.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel(4);
        stops.push(tx);
        let mut only = settings.only(&names);
        if i > 0 {
            // One HTTP endpoint for the process: the metrics and readiness are shared.
            only.http_listen = None;
        }
        let (metrics, handlers) = (metrics.clone(), &handlers);
        runs.push(async move { worker::run(transport, &only, handlers, metrics, rx).await });
    }
    tokio::spawn(forward_signals(signals, stops.clone()));
    let sweeper = sweep.map(|(at, s)| tokio::spawn(sweep_every(at, s)));
    // Every run until it ends; one that fails (its HTTP port taken, say) stops the
    // others, so that no database is left served alone.
    let mut runs = std::pin::pin!(runs);
    let mut aborted = Vec::new();
    let mut failed = None;
    while let Some(outcome) = runs.next().await {
        match outcome {
            Ok(RunOutcome::Drained) => {}
            Ok(RunOutcome::Aborted { reason }) => aborted.push(reason),
            Err(e) => {
                if failed.is_none() {
                    for tx in &stops {
                        let _ = tx.send(()).await;
                    }
                }
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(s) = sweeper {
        // A sweep cut short rolls back its open batch and releases its lock with its
        // connection; the next run picks up what is left.
        s.abort();
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(if aborted.is_empty() { RunOutcome::Drained } else { RunOutcome::Aborted { reason: aborted.join("; ") } })
}

/// Runs `sbworker sweep` at every interval on a connection of its own.
async fn sweep_every(at: crate::pg_tls::Endpoint, sweep: Sweeping) {
    let mut tick = tokio::time::interval(sweep.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let result = async {
            let (mut client, conn) = at.connect().await?;
            tokio::spawn(conn);
            Ok::<_, anyhow::Error>(crate::handoff::sweep::run(&mut client, sweep.opts).await?)
        }
        .await;
        match result {
            Ok(o) => info!(target: "sbworker::sweep", "{}", super::handoff::describe(&o, sweep.opts)),
            Err(e) => tracing::warn!(target: "sbworker::sweep", "sweep failed: {e:#}"),
        }
    }
}

/// The SIGTERM and SIGINT streams; from now on these signals no longer end the process.
fn install_signal_handlers() -> anyhow::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)> {
    use anyhow::Context;
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok((term, int))
}

/// Each SIGTERM or SIGINT becomes one message to every worker run (the first stops, the
/// second aborts).
async fn forward_signals(
    (mut term, mut int): (tokio::signal::unix::Signal, tokio::signal::unix::Signal),
    txs: Vec<mpsc::Sender<()>>,
) {
    loop {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!(signal = name, "stop requested");
        let mut any = false;
        for tx in &txs {
            any |= tx.send(()).await.is_ok();
        }
        if !any {
            return;
        }
    }
}

/// `sbworker run`: exit 0 after a clean drain, 1 otherwise, 78 for a bad configuration.
pub fn main(a: crate::cli::args::RunArgs) -> super::Outcome {
    let config = match a.flags.load(HANDLERS) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    drained(run(config)?)
}

/// `sbworker bench-worker`: `run` with the bench's handlers too.
#[cfg(feature = "tools")]
pub fn main_bench_worker(a: crate::cli::args::BenchWorkerArgs) -> super::Outcome {
    let config = match a.flags.load(crate::bench::effect::HANDLERS) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    drained(run_for_bench(config)?)
}

fn drained(outcome: RunOutcome) -> super::Outcome {
    match outcome {
        RunOutcome::Drained => Ok(std::process::ExitCode::SUCCESS),
        RunOutcome::Aborted { reason } => {
            Err(anyhow::anyhow!("aborted ({reason}); uncommitted groups were rolled back").into())
        }
    }
}

/// `sbworker check-config`: the effective configuration, or 78 with the key that is wrong.
pub fn main_check_config(a: crate::cli::args::CheckConfigArgs) -> super::Outcome {
    let config = match a.flags.load(HANDLERS) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    match check(&config) {
        Ok(text) => {
            print!("{text}");
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("sbworker: configuration error: {e:#}");
            Ok(std::process::ExitCode::from(EXIT_CONFIG))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_owned_parts;

    fn config(text: &str) -> crate::config::Config {
        crate::config::from_str(text, &Vec::new()).unwrap()
    }

    #[test]
    fn each_owner_checks_its_part_of_the_configuration() {
        let mssql = "[broker]\nkind = \"mssql\"\nconnection = \"Server=tcp:h,1433;User Id=u;Password=p;Command Timeout=5\"\n\
                     [queues.q]\nhandler = \"loonfactor-berekening\"\nwait_ms = 4000\n";
        let e = check_owned_parts(&config(mssql)).unwrap_err().to_string();
        assert!(e.starts_with("queues.q.wait_ms: is 4000 ms") && e.contains("Command Timeout (5000 ms)"), "{e}");
        assert!(check_owned_parts(&config(&mssql.replace("wait_ms = 4000", "wait_ms = 3000"))).is_ok());
    }
}
