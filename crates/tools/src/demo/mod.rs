//! `sbworker demo`: the whole pipeline on PostgreSQL, end to end. A throwaway cluster
//! (or a given empty database), the broker and roster schema, a realistic roster
//! loaded in one transaction, the calculation and collector workers in this process, a
//! burst of planner edits, then the results, the counts, throughput, latency from
//! commit to stored result, and a check that every key holds its latest version. With
//! `--mssql` the workers use the SQL Server transport (tiberius, over TCP) through the
//! Service Broker emulator, started in this process on the same broker.
//!
//! Layout: [`roster`] (generated roster, bulk load), [`edits`] (the burst), [`check`]
//! (drain and verify), [`oracle`] (the check's second builder of a key's Vraag),
//! [`progress`] (durations as progress lines say them), `rng`.

pub mod check;
pub mod edits;
pub mod oracle;
pub mod progress;
pub mod rng;
pub mod roster;

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::mpsc;

use crate::broker::mssql::MssqlTransport;
use crate::broker::postgres::{PostgresTransport, install_side, install_with, route};
use crate::config::{self, Config};
use crate::contract::Limits;
use crate::emulator::server::{Credentials, start as start_emulator};
use crate::engine::Tables;
use crate::handlers::{calculation, collector};
use crate::pg_cluster::Cluster;
use crate::transport::{Side, Transport};
use crate::worker::{self, Handlers, Metrics, RunOutcome};
use check::Progress;
use roster::Roster;

/// The demo's statements (`crates/tools/sql/postgres/statements/demo.sql`).
use crate::statements::postgres_demo as stmt;

/// The calculation queue and the answer queue of `003_calculation.sql`.
pub use crate::handlers::{DATA_QUEUE, REKEN_QUEUE};

/// Conversation groups the collector's readers take per transaction in the demo and the
/// bench: the answers of several keys stored and committed together. Measured against
/// one a transaction (docs/benchmarks.md, "Batching the collector"): edits/s within the
/// spread, 2.3 statements sent fewer per edit, the open loop's p99 about half. Not on the
/// calculation's queue: a planner that finds its key's group held there begins a new
/// dialog.
pub const COLLECTOR_GROUPS_PER_TRANSACTION: u32 = 4;

#[derive(Debug, Clone)]
pub struct Options {
    /// Employees (one key each).
    pub size: usize,
    /// Edits in the burst (default: three per employee).
    pub edits: Option<usize>,
    /// An empty database to use instead of a throwaway cluster.
    pub postgres: Option<String>,
    /// Most readers of the calculation queue.
    pub readers: u32,
    pub seed: u64,
    /// Run the workers on the SQL Server transport through the emulator.
    pub mssql: bool,
    /// Show progress lines on stderr.
    pub progress: bool,
    /// Other workers than sbworker's work the pipeline (the bench's River, started and
    /// stopped by the caller): the SQL that sends a key's Vraag to them, run after the
    /// install; sbworker's workers are then not started. `None`: sbworker's.
    pub external_setup: Option<String>,
    /// The burst's edits a second, paced by plan (an open loop); `None`: as fast as the
    /// planners can.
    pub pace: Option<f64>,
    /// The calculation queue's readers take up to this many conversation groups per
    /// transaction (`groups_per_transaction`; 1: one each).
    pub groups_per_transaction: u32,
    /// The collector's queue's readers: [`COLLECTOR_GROUPS_PER_TRANSACTION`] in the demo
    /// and the bench.
    pub collector_groups_per_transaction: u32,
    /// Conversation reuse, with this idle time in seconds (`None`: a dialog per
    /// request).
    pub dialog_reuse_idle_seconds: Option<u32>,
    /// The seed's topology: the roster on a server of its own and this many calculation
    /// servers, joined by routes (`sbworker link`), new dialogs taking them in turn; a
    /// worker per database. 0: one database.
    pub split: u32,
    /// With `split` and `postgres` given: the calculation databases to use (empty, on
    /// servers with logical replication), one per split; empty: the demo starts a
    /// throwaway server for each.
    pub calculation: Vec<String>,
}

/// The burst's edits when none are given: three per employee.
pub fn default_edits(size: usize) -> usize {
    size * 3
}

/// One phase's figures.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub requests: i64,
    pub stored: i64,
    pub superseded: i64,
    pub faults: i64,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub load: Phase,
    pub burst: Phase,
    pub verdict: check::Verdict,
    /// Split: the keys each calculation server computed (its version claims).
    pub spread: Vec<i64>,
}

/// The worker configuration of the pipeline (TOML): the calculation queue with up to
/// `readers` readers, and the collector on the answer queue.
pub fn worker_config_text(url: &str, readers: u32) -> String {
    format!(
        "[broker]\nkind = \"postgres\"\nconnection = {}\n\n\
         [worker]\nretry_min_delay_ms = 20\nretry_max_delay_ms = 1000\nscale_interval_ms = 250\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"{}\"\nmin_readers = 1\nmax_readers = {readers}\nbatch = 10\nwait_ms = 1000\n\n\
         [queues.{DATA_QUEUE}]\nhandler = \"{}\"\nmin_readers = 1\nmax_readers = 2\nbatch = 100\nwait_ms = 1000\n",
        toml::Value::String(url.to_owned()),
        calculation::NAME,
        collector::NAME,
    )
}

/// [`worker_config_text`], read.
pub fn worker_config(url: &str, readers: u32) -> Config {
    config::from_str(&worker_config_text(url, readers), &Vec::new()).expect("the demo's configuration is valid")
}

/// Writes the progress line (rewritten in place on a terminal, every 2 s otherwise).
struct ProgressLine {
    phase: &'static str,
    tty: bool,
    last: Option<Instant>,
    quiet: bool,
}

impl ProgressLine {
    fn show(&mut self, p: &Progress, started: Instant) {
        if self.quiet {
            return;
        }
        let now = Instant::now();
        let every = if self.tty { Duration::from_millis(200) } else { Duration::from_secs(2) };
        if self.last.is_some_and(|l| now - l < every) && !p.drained() {
            return;
        }
        self.last = Some(now);
        let secs = started.elapsed().as_secs_f64().max(0.001);
        let rate = p.answered as f64 / secs;
        // The time left at the rate so far (the requests sent so far: in the edits phase
        // the planners may still be sending).
        let left = match p.sent - p.answered {
            0 => "done".to_string(),
            n if rate > 0.0 => format!("about {} left", progress::human(n as f64 / rate)),
            _ => "time left: after the first answers".to_string(),
        };
        let line = format!(
            "[{}] {}/{} answered, {} faults, {} messages waiting, {:.0} answers/s, {} elapsed, {left}",
            self.phase,
            p.answered,
            p.sent,
            p.faults,
            p.messages,
            rate,
            progress::human(secs),
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.tty { write!(err, "\r\x1b[2K{line}") } else { writeln!(err, "{line}") };
        if self.tty && p.drained() {
            let _ = writeln!(err);
        }
    }
}

async fn phase(client: &tokio_postgres::Client, since: &str, seconds: f64) -> anyhow::Result<Phase> {
    let r = client.query_one(stmt::OUTCOMES.sql, &[&since]).await?;
    Ok(Phase {
        requests: r.get(0),
        stored: r.get(1),
        superseded: r.get(2),
        faults: r.get(3),
        p50_ms: r.get(4),
        p99_ms: r.get(5),
        seconds,
    })
}

async fn now_text(client: &tokio_postgres::Client) -> anyhow::Result<String> {
    Ok(client.query_one(stmt::SERVER_CLOCK.sql, &[]).await?.get(0))
}

/// The logins the demo's workers and planners use on its own cluster.
pub const DEMO_WORKER: &str = "sbworker_demo_worker";
pub const DEMO_PLANNER: &str = "sbworker_demo_planner";

/// Runs the demo, writing the report to `out`; an error says what failed.
pub async fn run(opts: &Options, out: &mut (dyn Write + Send)) -> anyhow::Result<Report> {
    let tables = Arc::new(Tables::built_in()?);
    anyhow::ensure!(
        opts.split == 0
            || (!opts.mssql
                && opts.external_setup.is_none()
                && (opts.postgres.is_none() == opts.calculation.is_empty())
                && (opts.calculation.is_empty() || opts.calculation.len() == opts.split as usize)),
        "--split starts servers of its own, with sbworker's PostgreSQL workers: it takes no --postgres or --mssql"
    );
    let (_cluster, url) = match &opts.postgres {
        Some(url) => (None, url.clone()),
        None if opts.split > 0 => {
            eprintln!("starting the roster side's throwaway PostgreSQL cluster (wal_level=logical) ...");
            let cluster = Cluster::start(&SPLIT_SETTINGS).context("starting PostgreSQL")?;
            let url = cluster.create_database("sbworker_demo").await.context("creating the demo database")?;
            (Some(cluster), url)
        }
        None => {
            eprintln!("starting a throwaway PostgreSQL cluster (synchronous_commit=off) ...");
            let cluster = Cluster::start(&["synchronous_commit=off"]).context("starting PostgreSQL")?;
            let url = cluster.create_database("sbworker_demo").await.context("creating the demo database")?;
            (Some(cluster), url)
        }
    };
    if opts.split > 0 {
        install_side(&url, true, Some(Side::Roster)).await.context("installing the roster side")?;
    } else {
        install_with(&url, true).await.context("installing the broker and the roster schema")?;
    }
    let calculation = calculation_servers(&url, opts.split, &opts.calculation).await?;
    let (client, conn) = crate::pg_tls::connect(&url).await?;
    tokio::spawn(conn);
    if let Some(idle) = opts.dialog_reuse_idle_seconds {
        client.execute(stmt::DIALOG_REUSE.sql, &[&i64::from(idle)]).await.context("turning conversation reuse on")?;
    }
    let existing: i64 = client.query_one(stmt::DIENSTVERBAND_COUNT.sql, &[]).await?.get(0);
    anyhow::ensure!(existing == 0, "the database already holds a roster ({existing} employees): give an empty one");
    // On its own cluster the demo runs as production would: the workers and the planners
    // as logins of their own with sbworker's roles, neither a superuser. (A database given
    // with --postgres is used with the login given.)
    let (worker_url, planner_url) = if opts.postgres.is_none() {
        client.batch_execute(stmt::DEMO_LOGINS.sql).await.context("creating the demo's logins")?;
        crate::broker::postgres::grant_roles(
            &url,
            &[("sbworker_worker", DEMO_WORKER.to_owned()), ("sbworker_sender", DEMO_PLANNER.to_owned())],
        )
        .await
        .context("granting the demo's logins their roles")?;
        eprintln!(
            "workers as login {DEMO_WORKER} (role sbworker_worker), planners as {DEMO_PLANNER} (sbworker_sender): \
             neither a superuser ..."
        );
        for (_, calc) in &calculation {
            let (c, conn) = crate::pg_tls::connect(calc).await?;
            tokio::spawn(conn);
            c.batch_execute(stmt::DEMO_LOGINS.sql).await.context("creating the demo's logins")?;
            crate::broker::postgres::grant_roles(calc, &[("sbworker_worker", DEMO_WORKER.to_owned())])
                .await
                .context("granting the demo's worker login its role")?;
        }
        (format!("{url} user={DEMO_WORKER}"), format!("{url} user={DEMO_PLANNER}"))
    } else {
        (url.clone(), url.clone())
    };
    let (mut planner, conn) = crate::pg_tls::connect(&planner_url).await?;
    tokio::spawn(conn);

    let mut config = worker_config(&worker_url, opts.readers);
    for (name, q) in config.queues.iter_mut() {
        q.groups_per_transaction =
            if name == DATA_QUEUE { opts.collector_groups_per_transaction } else { opts.groups_per_transaction };
    }
    config.check().context("the demo's worker configuration")?;
    let metrics = Arc::new(Metrics::new());
    let (stop, signals) = mpsc::channel(2);
    // Split: the collector on the roster side, a calculation worker on each calculation
    // server, each stopped by a channel of its own.
    let mut split_stops = Vec::new();
    let mut split_workers = Vec::new();
    if opts.split > 0 {
        let mut data = config.clone();
        data.queues.retain(|name, _| name == DATA_QUEUE);
        let (tx, rx) = mpsc::channel(2);
        split_stops.push(tx);
        split_workers.push(
            spawn_workers(PostgresTransport::new(worker_url.clone()), data, tables.clone(), metrics.clone(), rx)
                .await?,
        );
        for (_, calc) in &calculation {
            let mut reken = config.clone();
            reken.queues.retain(|name, _| name == REKEN_QUEUE);
            let (tx, rx) = mpsc::channel(2);
            split_stops.push(tx);
            // (Databases given are used with the login given, as the roster's is.)
            let url = if opts.postgres.is_none() { format!("{calc} user={DEMO_WORKER}") } else { calc.clone() };
            split_workers
                .push(spawn_workers(PostgresTransport::new(url), reken, tables.clone(), metrics.clone(), rx).await?);
        }
    }
    let (_emulator_stop, worker) = if let Some(setup) = &opts.external_setup {
        client.batch_execute(setup).await.context("setting the database up for the external workers")?;
        (None, None)
    } else if opts.split > 0 {
        (None, None)
    } else if opts.mssql {
        // The emulator on a free port, with a password made up for this run.
        let (stop_tx, stop_rx) = worker::Stop::new();
        let password = uuid::Uuid::new_v4().simple().to_string();
        let creds = Credentials { user: "sbworker".into(), password: password.clone() };
        let (addr, _task) = start_emulator("127.0.0.1:0".parse().expect("an address"), url.clone(), creds, stop_rx)
            .await
            .context("starting the Service Broker emulator")?;
        eprintln!("workers on the SQL Server transport, through the emulator on {addr} ...");
        config.broker.kind = config::BrokerKind::Mssql;
        config.broker.connection = format!(
            "Server=tcp:{},{};Database=sbworker_demo;User Id=sbworker;Password={password};Encrypt=false",
            addr.ip(),
            addr.port()
        );
        config.check().context("the demo's SQL Server configuration")?;
        let transport = MssqlTransport::new(&config.broker.connection)?;
        (Some(stop_tx), Some(spawn_workers(transport, config, tables.clone(), metrics.clone(), signals).await?))
    } else {
        let transport = PostgresTransport::new(worker_url.clone());
        (None, Some(spawn_workers(transport, config, tables.clone(), metrics.clone(), signals).await?))
    };
    let tty = std::io::stderr().is_terminal();
    let limit = Duration::from_secs(600);

    // Phase 1: the whole roster in one transaction.
    let roster = Roster::generate(opts.size, opts.seed, true);
    let since = now_text(&client).await?;
    let started = Instant::now();
    roster.load(&mut planner).await.context("loading the roster")?;
    let mut line = ProgressLine { phase: "roster import", tty, last: None, quiet: !opts.progress };
    check::wait_until(&client, limit, check::Progress::worked_off, |p| line.show(p, started)).await?;
    let load = phase(&client, &since, started.elapsed().as_secs_f64()).await?;
    check::wait_drained(&client, limit, |p| line.show(p, started)).await?;

    // Phase 2: a burst of edits from four planners at once (or paced: edit i of the
    // burst at i / pace seconds, the planners taking turns).
    let edits = edits::burst(&roster, opts.edits.unwrap_or(default_edits(opts.size)), opts.seed);
    let since = now_text(&client).await?;
    let started = Instant::now();
    let planners = 4;
    let mut tasks = tokio::task::JoinSet::new();
    let begin = tokio::time::Instant::now();
    for p in 0..planners {
        let mine: Vec<(usize, edits::Edit)> = edits.iter().cloned().enumerate().skip(p).step_by(planners).collect();
        let (c, conn) = crate::pg_tls::connect(&planner_url).await?;
        tokio::spawn(conn);
        let pace = opts.pace;
        tasks.spawn(async move {
            for (i, e) in &mine {
                if let Some(pace) = pace {
                    tokio::time::sleep_until(begin + Duration::from_secs_f64(*i as f64 / pace)).await;
                }
                e.apply(&c).await?;
            }
            Ok::<(), tokio_postgres::Error>(())
        });
    }
    let mut line = ProgressLine { phase: "planner edits", tty, last: None, quiet: !opts.progress };
    while let Some(done) = tasks.join_next().await {
        done?.context("applying an edit")?;
    }
    // Timed to the work's end; reused dialogs close once their keys have been idle.
    check::wait_until(&client, limit, check::Progress::worked_off, |p| line.show(p, started)).await?;
    let burst = phase(&client, &since, started.elapsed().as_secs_f64()).await?;
    check::wait_drained(&client, limit, |p| line.show(p, started)).await?;

    // (External workers are the caller's to stop.)
    for tx in &split_stops {
        let _ = tx.send(()).await;
    }
    for w in split_workers {
        match w.await? {
            Ok(RunOutcome::Drained) => {}
            Ok(RunOutcome::Aborted { reason }) => anyhow::bail!("the workers did not stop cleanly: {reason}"),
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(worker) = worker {
        let _ = stop.send(()).await;
        match worker.await? {
            Ok(RunOutcome::Drained) => {}
            Ok(RunOutcome::Aborted { reason }) => anyhow::bail!("the workers did not stop cleanly: {reason}"),
            Err(e) => return Err(e.into()),
        }
    }
    let verdict = check::verify(&client, &tables).await?;
    let mut spread = Vec::new();
    for (_, calc) in &calculation {
        let (c, conn) = crate::pg_tls::connect(calc).await?;
        tokio::spawn(conn);
        spread.push(c.query_one(stmt::KEYS_COMPUTED.sql, &[]).await?.get::<_, i64>(0));
    }
    let report = Report { load, burst, verdict, spread };
    write_report(out, &client, &report, &roster, opts, &metrics).await?;
    Ok(report)
}

/// Settings of a split demo's servers: logical replication carries the routes.
const SPLIT_SETTINGS: [&str; 4] =
    ["synchronous_commit=off", "wal_level=logical", "max_replication_slots=10", "max_wal_senders=10"];

/// `n` calculation servers, each a database installed as the calculation side and
/// linked to the roster side at `roster`: those `given`, or each on a throwaway cluster
/// of its own: (its cluster, if the demo started it; URL) each.
async fn calculation_servers(roster: &str, n: u32, given: &[String]) -> anyhow::Result<Vec<(Option<Cluster>, String)>> {
    let mut out = Vec::new();
    for i in 1..=n {
        let (cluster, url) = match given.get(i as usize - 1) {
            Some(url) => (None, url.clone()),
            None => {
                eprintln!(
                    "starting calculation server {i} of {n} (a throwaway cluster, wal_level=logical) and linking it ..."
                );
                let cluster = Cluster::start(&SPLIT_SETTINGS).context("starting PostgreSQL")?;
                let url =
                    cluster.create_database("sbworker_demo_reken").await.context("creating a calculation database")?;
                (Some(cluster), url)
            }
        };
        install_side(&url, false, Some(Side::Calc)).await.context("installing the calculation side")?;
        route::link(roster, &url).await.context("linking the calculation server")?;
        out.push((cluster, url));
    }
    Ok(out)
}

/// Checks the queues, then runs the calculation and collector workers on `transport` on
/// a task of their own, until `signals`.
async fn spawn_workers<T: Transport + 'static>(
    transport: T,
    config: Config,
    tables: Arc<Tables>,
    metrics: Arc<Metrics>,
    signals: mpsc::Receiver<()>,
) -> anyhow::Result<tokio::task::JoinHandle<Result<RunOutcome, worker::WorkerError>>>
where
    T::Session: crate::transport::PayrollStore,
{
    let limits = Limits { max_body_bytes: config.engine.max_body_bytes, ..Limits::default() };
    let handlers = Handlers::default()
        .with(calculation::NAME, Arc::new(calculation::Calculation::new(tables, limits)))
        .with(collector::NAME, Arc::new(collector::Collector::new(limits)));
    let settings = worker::Settings::from_config(&config);
    worker::preflight(&transport, &settings).await?;
    Ok(tokio::spawn(async move { worker::run(transport, &settings, &handlers, metrics, signals).await }))
}

async fn write_report(
    out: &mut (dyn Write + Send),
    client: &tokio_postgres::Client,
    r: &Report,
    roster: &Roster,
    opts: &Options,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    let n = roster.employees.len();
    let mut sample: Vec<i32> = roster.employees.iter().take(4).map(|e| e.id).collect();
    if let Some(hot) = roster.employees.get(n / 20).map(|e| e.id)
        && !sample.contains(&hot)
    {
        sample.push(hot);
    }
    let transport =
        if opts.mssql { "SQL Server transport through the Service Broker emulator" } else { "PostgreSQL broker" };
    writeln!(
        out,
        "\nsbworker demo: {n} employees, April 2026, {} planner edits; workers on the {transport}",
        r.burst.requests.max(0)
    )?;
    writeln!(out, "\nResults (a few employees):")?;
    writeln!(
        out,
        "  {:>6}  {:>4}  {:>6}  {:>6}  {:>8}  {:>8}  {:>9}  {:>7}  {:>5}",
        "empl.", "kind", "hours", "versie", "worked h", "ORT h", "ORT euro", "sick h", "days"
    )?;
    for row in client.query(stmt::SAMPLE.sql, &[&sample]).await? {
        writeln!(
            out,
            "  {:>6}  {:>4}  {:>6}  {:>6}  {:>8}  {:>8}  {:>9}  {:>7}  {:>5}",
            row.get::<_, i32>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2),
            row.get::<_, i64>(3),
            row.get::<_, String>(4),
            row.get::<_, String>(5),
            row.get::<_, String>(6),
            row.get::<_, String>(7),
            row.get::<_, String>(8),
        )?;
    }
    writeln!(
        out,
        "\n  {:<14} {:>8} {:>8} {:>11} {:>7} {:>10} {:>9} {:>9}",
        "phase", "requests", "stored", "superseded", "faults", "answers/s", "p50 ms", "p99 ms"
    )?;
    for (name, p) in [("roster import", &r.load), ("planner edits", &r.burst)] {
        writeln!(
            out,
            "  {:<14} {:>8} {:>8} {:>11} {:>7} {:>10.0} {:>9.1} {:>9.1}",
            name,
            p.requests,
            p.stored,
            p.superseded,
            p.faults,
            p.requests as f64 / p.seconds.max(0.001),
            p.p50_ms,
            p.p99_ms
        )?;
    }
    let text = metrics.encode();
    let count = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |a, b| a + b)
    };
    writeln!(
        out,
        "\n  worker: {} messages received, {} retried groups, {} dead-lettered; {} calculation readers at most",
        count("sbworker_messages_received_total"),
        count("sbworker_groups_retried_total"),
        count("sbworker_messages_dead_lettered_total"),
        opts.readers
    )?;
    writeln!(out, "  latency: from the roster transaction's commit to the stored result (or superseded answer)")?;
    if !r.spread.is_empty() {
        let each: Vec<String> = r.spread.iter().map(i64::to_string).collect();
        writeln!(
            out,
            "  split: the roster and {} calculation servers, each a PostgreSQL server of its own, joined by routes \
             (logical replication); keys computed per calculation server: {}",
            r.spread.len(),
            each.join(", ")
        )?;
    }
    if let Some(idle) = opts.dialog_reuse_idle_seconds {
        let row = client.query_one(stmt::DIALOGS_USED.sql, &[]).await?;
        writeln!(
            out,
            "  conversation reuse: {} requests on {} dialogs, each ended after its key was idle {idle} s",
            row.get::<_, i64>(0),
            row.get::<_, i64>(1)
        )?;
    }
    let v = &r.verdict;
    for (dv, reason) in &v.faulted {
        writeln!(out, "  Fout for employee {dv} (expected: no salary on file): {reason}")?;
    }
    if v.problems.is_empty() {
        writeln!(
            out,
            "\nOK: every key holds the result of its latest roster version ({} of {} keys, recomputed and equal; \
             {} answered with a Fout); no stored version ever went back; no conversation left open.",
            v.latest,
            v.keys,
            v.faulted.len()
        )?;
    } else {
        writeln!(out, "\nFAILED:")?;
        for p in v.problems.iter().take(20) {
            writeln!(out, "  {p}")?;
        }
        anyhow::bail!("{} keys do not hold their latest result", v.problems.len());
    }
    Ok(())
}
