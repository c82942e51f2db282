//! One measured run of a queue workload (burn-down or the headline) by one contender:
//! sbworker as a real `sbworker run` process on the PostgreSQL broker or on the SQL
//! Server transport through a real `sbworker emulator` process, or pgbench doing the
//! same commits and row writes (the limit); and the pgbench commit calibration.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

pub use super::install_peers::*;
pub use super::limit::*;
pub use super::open_loop::*;
use super::peers::Peer;
use super::world::{self, World};
use super::{Contender, Workload, effect, stmt};

/// What a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub workload: Workload,
    pub contender: Contender,
    pub synchronous_commit: bool,
    pub repetition: usize,
    pub messages: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub commits_per_message: f64,
    pub wal_bytes_per_message: f64,
    /// CPU seconds per 1,000 messages of the worker process (and the emulator's).
    pub worker_cpu_per_1000: Option<f64>,
    pub emulator_cpu_per_1000: Option<f64>,
    pub postgres_cpu_per_1000: f64,
    pub worker_peak_rss_mib: Option<f64>,
    pub readers: u32,
    /// Connections the contender held to its broker (PostgreSQL, or TDS to the emulator).
    pub connections: u32,
    /// Headline: messages applied out of order within their group (must be 0).
    pub out_of_order: Option<i64>,
    /// Headline: every message took effect once and has one reply.
    pub exactly_once: Option<bool>,
    /// The statements that took the server's time in the run, per message
    /// (`pg_stat_statements`, nested ones too; empty where it is not installed).
    #[serde(default)]
    pub statements: Vec<super::pipeline::StatementTime>,
}

/// Resets `pg_stat_statements` before a run (it counts for the whole cluster; the runs
/// take turns). False when the cluster has none.
pub(super) async fn statements_reset(url: &str) -> anyhow::Result<bool> {
    let c = world::connect(url).await?;
    let available: bool = c.query_one(stmt::PGSS_AVAILABLE.sql, &[]).await?.get(0);
    if available {
        c.batch_execute(stmt::PGSS_INSTALL.sql).await?;
        c.batch_execute(stmt::PGSS_RESET.sql).await?;
    }
    Ok(available)
}

/// Nested statements tracked too in `url`'s database, for the sessions that start after
/// this (a counting run); false when the cluster has no `pg_stat_statements`.
pub(super) async fn statements_track_all(url: &str) -> anyhow::Result<bool> {
    let c = world::connect(url).await?;
    let available: bool = c.query_one(stmt::PGSS_AVAILABLE.sql, &[]).await?.get(0);
    if available {
        c.batch_execute(stmt::PGSS_TRACK_ALL.sql).await?;
    }
    Ok(available)
}

/// The statements of the run in `url`'s database that took the server's time, per
/// message (empty when `pg_stat_statements` is not there).
pub(super) async fn statements_top(
    url: &str,
    available: bool,
    messages: f64,
) -> anyhow::Result<Vec<super::pipeline::StatementTime>> {
    if !available {
        return Ok(Vec::new());
    }
    let c = world::connect(url).await?;
    Ok(c.query(stmt::PGSS_TOP.sql, &[&messages.max(1.0)])
        .await?
        .iter()
        .map(|r| super::pipeline::StatementTime {
            statement: r.get(0),
            calls_per_request: r.get(1),
            mean_ms: r.get(2),
            ms_per_request: r.get(3),
            top_level: r.get(4),
            rows_per_call: r.get(5),
        })
        .collect())
}

/// The work of the run in `url`'s database per request (`None` when `pg_stat_statements`
/// is not there): counts, which the machine's speed does not move.
pub(super) async fn statements_work(
    url: &str,
    available: bool,
    requests: f64,
) -> anyhow::Result<Option<super::pipeline::WorkPerRequest>> {
    if !available {
        return Ok(None);
    }
    let c = world::connect(url).await?;
    let r = c.query_one(stmt::PGSS_TOTALS.sql, &[&requests.max(1.0)]).await?;
    Ok(Some(super::pipeline::WorkPerRequest { sent: r.get(0), nested: r.get(1), buffers: r.get(2) }))
}

/// The shape of a run.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub groups: i32,
    pub per_group: i32,
    /// Readers (jobs at once) of a contender with one connection of its own besides
    /// them: the connection budget less one.
    pub readers: u32,
}

impl Shape {
    pub fn messages(&self) -> u64 {
        self.groups as u64 * self.per_group as u64
    }

    /// Readers and connections of `contender` within the budget: sbworker on the
    /// PostgreSQL broker has a working connection per reader and one side connection for
    /// all (LISTEN, attempt counts); through the emulator each reader has two TDS
    /// connections (the transaction's and the one that counts attempts).
    pub fn readers_of(&self, contender: Contender) -> (u32, u32) {
        readers_of(self.readers, contender)
    }
}

/// [`Shape::readers_of`] for `readers`, the budget's readers of a contender with one
/// listening connection.
pub fn readers_of(readers: u32, contender: Contender) -> (u32, u32) {
    match contender {
        Contender::SbworkerTds => (readers.div_ceil(2), readers.div_ceil(2) * 2),
        _ => (readers, readers + 1),
    }
}

/// Waits for the server's statistics of the last transactions to be counted (backends
/// report them within a second), so commits and WAL are read after the run's own.
pub(super) async fn settle() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}

/// Commits a reading itself adds (its own query's transaction).
pub(super) const READING: i64 = 1;

/// Commits and WAL so far, read on a connection of its own that closes at once (a
/// closing backend reports its statistics as it goes).
pub(super) async fn reading(url: &str) -> anyhow::Result<(i64, i64)> {
    let c = world::connect(url).await?;
    world::commits_and_wal(&c).await
}

pub(super) async fn set_sync(world: &World, db: &str, on: bool) -> anyhow::Result<()> {
    let c = world::connect(&world.cluster.url("postgres")).await?;
    c.batch_execute(
        &stmt::SET_SYNC
            .sql
            .replace("{db}", &format!("\"{}\"", db.replace('"', "\"\"")))
            .replace("{value}", if on { "on" } else { "off" }),
    )
    .await?;
    Ok(())
}

/// Before a run: the contender's tables emptied (the statement `reset`) and vacuumed, and
/// `synchronous_commit` set for the run's connections; a connection for the preload.
pub(super) async fn fresh(
    world: &World,
    db: &str,
    url: &str,
    reset: &str,
    sync: bool,
) -> anyhow::Result<tokio_postgres::Client> {
    let c = world::connect(url).await?;
    c.batch_execute(reset).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    set_sync(world, db, sync).await?;
    Ok(c)
}

/// Preloads `shape`'s dialogs and messages with the broker's own `sb.send`, a hundred
/// groups a statement. The tables were just emptied: after the first statement their
/// statistics are taken again, which also drops the plans that the broker's functions
/// cached for empty tables (they would scan the whole queue on every send).
pub(super) async fn preload(c: &tokio_postgres::Client, shape: Shape, body: &[u8]) -> anyhow::Result<()> {
    let mut left = shape.groups;
    let mut first = true;
    while left > 0 {
        let n = left.min(100);
        c.execute(stmt::PRELOAD.sql, &[&n, &shape.per_group, &body]).await.context("preloading messages")?;
        if first {
            c.batch_execute(stmt::ANALYZE.sql).await?;
            first = false;
        }
        left -= n;
    }
    Ok(())
}

/// A child process that is stopped when dropped.
pub(super) struct Process(Child);

impl Process {
    pub(super) fn new(child: Child) -> Process {
        Process(child)
    }

    pub(super) fn pid(&self) -> u32 {
        self.0.id().unwrap_or(0)
    }

    /// Waits until the process exits on its own.
    pub(super) async fn exited(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.0.wait().await
    }

    pub(super) async fn terminate(mut self) -> anyhow::Result<()> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(60), self.0.wait()).await??;
        // graphile-worker shuts down gracefully, then re-raises the signal on itself.
        use std::os::unix::process::ExitStatusExt;
        if !status.success() && status.signal() != Some(libc::SIGTERM) {
            bail!("the worker exited with {status}");
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.start_kill();
    }
}

/// Runs `command` to its end; on failure, an error naming `what` with its stderr.
pub(super) async fn run_to_end(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = command.output().await.with_context(|| format!("{what}: starting it"))?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Starts `sbworker emulator` on the database; its TDS address.
async fn start_emulator(bin: &Path, url: &str, password: &str, log: &Path) -> anyhow::Result<(Process, String)> {
    let mut child = Command::new(bin)
        .args(["emulator", "--listen", "127.0.0.1:0", "--postgres", url, "--password", password])
        .env("SBWORKER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true)
        .spawn()
        .context("starting sbworker emulator")?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    while let Some(line) = lines.next_line().await? {
        if let Some(rest) = line.trim().strip_prefix("Server=tcp:") {
            let addr = rest.split(';').next().unwrap_or_default().to_owned();
            // The rest of what it prints (its certificate) is read and dropped, so the
            // pipe stays open for as long as it runs.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok((Process(child), addr));
        }
    }
    bail!("the emulator ended before it listened (see {})", log.display())
}

/// Where a bench worker of `contender` connects: the PostgreSQL broker itself, or a
/// `sbworker emulator` started on it (SQL Server transport); the emulator, the broker's
/// kind and the connection string.
async fn broker_for(
    contender: Contender,
    db: &str,
    url: &str,
    dir: &Path,
    tag: &str,
) -> anyhow::Result<(Option<Process>, &'static str, String)> {
    if contender != Contender::SbworkerTds {
        return Ok((None, "postgres", url.to_owned()));
    }
    let bin = std::env::current_exe().context("finding the sbworker binary")?;
    let password = uuid::Uuid::new_v4().simple().to_string();
    let (p, addr) = start_emulator(&bin, url, &password, &dir.join(format!("{tag}.emulator.log"))).await?;
    let conn = format!("Server=tcp:{addr};Database={db};User Id=sbworker;Password={password};Encrypt=false");
    Ok((Some(p), "mssql", conn))
}

/// One run of sbworker: preload, start the worker process, time the drain, verify.
#[allow(clippy::too_many_arguments)]
pub async fn sbworker(
    world: &World,
    db: &str,
    url: &str,
    contender: Contender,
    workload: Workload,
    shape: Shape,
    sync: bool,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<Measured> {
    {
        let c = fresh(world, db, url, stmt::RESET.sql, sync).await?;
        preload(&c, shape, &[b'x'; 100]).await?;
    }
    let tag = format!("{}-{}-{}-{repetition}", workload.key(), contender.key(), if sync { "sync" } else { "async" });
    let (emulator, kind, connection) = broker_for(contender, db, url, dir, &tag).await?;
    let batch = match workload {
        Workload::Headline => 1,
        Workload::BurnDown => 100,
    };
    let handler = match workload {
        Workload::BurnDown => effect::NOOP_NAME,
        Workload::Headline => effect::NAME,
    };
    let (readers, connections) = shape.readers_of(contender);
    let config = worker_config(kind, &connection, handler, readers, batch);
    let config_path = dir.join(format!("{tag}.toml"));
    std::fs::write(&config_path, config)?;

    let pgss = statements_reset(url).await?;
    settle().await;
    let (commits0, wal0) = reading(url).await?;
    let server0 = world.server_cpu();
    let emulator_cpu0 = emulator.as_ref().and_then(|e| world::cpu_seconds(e.pid())).unwrap_or(0.0);
    let started = Instant::now();
    let worker = spawn_worker(&config_path, &dir.join(format!("{tag}.worker.log")))?;
    let total = shape.messages() as i64;
    let c = world::connect(url).await?;
    let polls = match workload {
        Workload::Headline => drained(&c, &tag, total, started, Progress::Replies).await?,
        Workload::BurnDown => drained(&c, &tag, total, started, Progress::Waiting).await?,
    };
    let seconds = started.elapsed().as_secs_f64();
    let worker_cpu = world::cpu_seconds(worker.pid());
    let rss = world::peak_rss_mib(worker.pid());
    let emulator_cpu = emulator.as_ref().and_then(|e| world::cpu_seconds(e.pid())).map(|s| s - emulator_cpu0);
    let server1 = world.server_cpu();
    worker.terminate().await?;
    drop(emulator);
    drop(c);
    settle().await;
    let (commits1, wal1) = reading(url).await?;
    let n = shape.messages() as f64;
    let statements = statements_top(url, pgss, n).await?;
    let c = world::connect(url).await?;
    let (out_of_order, exactly_once) = match workload {
        Workload::Headline => {
            let (ooo, once) = verify_headline(&c, shape).await?;
            (Some(ooo), Some(once))
        }
        Workload::BurnDown => (None, None),
    };
    super::progress(&format!("{tag}: {total} messages in {seconds:.2} s"));
    Ok(Measured {
        workload,
        contender,
        synchronous_commit: sync,
        repetition,
        messages: shape.messages(),
        seconds,
        per_second: n / seconds,
        commits_per_message: (commits1 - commits0 - READING - polls) as f64 / n,
        wal_bytes_per_message: (wal1 - wal0) as f64 / n,
        worker_cpu_per_1000: worker_cpu.map(|s| s * 1000.0 / n),
        emulator_cpu_per_1000: emulator_cpu.map(|s| s * 1000.0 / n),
        postgres_cpu_per_1000: world::server_cpu_seconds(&server0, &server1) * 1000.0 / n,
        worker_peak_rss_mib: rss,
        readers,
        connections,
        out_of_order,
        exactly_once,
        statements,
    })
}

/// The configuration of a bench worker: the bench queue with `readers` readers.
pub(super) fn worker_config(kind: &str, connection: &str, handler: &str, readers: u32, batch: u32) -> String {
    format!(
        "[broker]\nkind = \"{kind}\"\nconnection = {}\n\n[worker]\nretry_min_delay_ms = 20\nretry_max_delay_ms = 1000\n\n\
         [log]\nlevel = \"warn\"\n\n\
         [queues.{}]\nhandler = \"{handler}\"\nmin_readers = {readers}\nmax_readers = {readers}\nbatch = {batch}\nwait_ms = 1000\n",
        toml::Value::String(connection.to_owned()),
        effect::QUEUE,
    )
}

/// A contender of workloads 3 and 4: sbworker on either transport, or a peer.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    /// sbworker (PostgreSQL broker or SQL Server transport), its database and URL.
    Sbworker(Contender, &'a str, &'a str),
    Peer(&'a Peer),
}

impl Subject<'_> {
    pub fn contender(&self) -> Contender {
        match self {
            Subject::Sbworker(c, ..) => *c,
            Subject::Peer(p) => p.contender,
        }
    }

    /// The bench's connection string for the contender's database.
    pub fn url(&self) -> &str {
        match self {
            Subject::Sbworker(_, _, url) => url,
            Subject::Peer(p) => &p.url,
        }
    }

    /// The contender's tables emptied and vacuumed; a connection.
    pub(super) async fn fresh(&self, world: &World, sync: bool) -> anyhow::Result<tokio_postgres::Client> {
        match self {
            Subject::Sbworker(_, db, url) => fresh(world, db, url, stmt::RESET.sql, sync).await,
            Subject::Peer(p) => p.fresh(world, sync).await,
        }
    }

    /// A fresh world with `shape`'s messages (or jobs) preloaded; a connection.
    pub(super) async fn load(&self, world: &World, shape: Shape, sync: bool) -> anyhow::Result<tokio_postgres::Client> {
        match self {
            Subject::Sbworker(_, db, url) => {
                let c = fresh(world, db, url, stmt::RESET.sql, sync).await?;
                preload(&c, shape, &[b'x'; 100]).await?;
                Ok(c)
            }
            Subject::Peer(p) => p.load(world, shape, sync).await,
        }
    }

    /// The contender's worker (with sbworker: the effect handler, its readers within the
    /// budget, one message a transaction; through an emulator for the SQL Server
    /// transport), its configuration and logs in `dir` under `tag`.
    pub(super) async fn start(&self, shape: Shape, dir: &Path, tag: &str) -> anyhow::Result<Running> {
        match self {
            Subject::Sbworker(contender, db, url) => {
                let (emulator, kind, connection) = broker_for(*contender, db, url, dir, tag).await?;
                let config_path = dir.join(format!("{tag}.toml"));
                let (readers, _) = shape.readers_of(*contender);
                std::fs::write(&config_path, worker_config(kind, &connection, effect::NAME, readers, 1))?;
                let worker = spawn_worker(&config_path, &dir.join(format!("{tag}.worker.log")))?;
                Ok(Running { worker, emulator })
            }
            Subject::Peer(p) => {
                Ok(Running { worker: p.start(shape, &dir.join(format!("{tag}.log")))?, emulator: None })
            }
        }
    }
}

/// A contender's worker running, and the emulator it works through.
pub(super) struct Running {
    worker: Process,
    emulator: Option<Process>,
}

impl Running {
    pub(super) async fn terminate(self) -> anyhow::Result<()> {
        self.worker.terminate().await?;
        drop(self.emulator);
        Ok(())
    }
}

/// `sbworker bench-worker --config config` (this binary: `run` serving the bench's
/// handlers too), its log to `log`.
fn spawn_worker(config: &Path, log: &Path) -> anyhow::Result<Process> {
    let bin = std::env::current_exe().context("finding the sbworker binary")?;
    Ok(Process(
        Command::new(bin)
            .arg("bench-worker")
            .arg("--config")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting sbworker run")?,
    ))
}

pub(super) fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

/// How a run's progress is read: replies written, messages no longer waiting, or
/// replies and dead letters.
#[derive(Clone, Copy)]
pub(super) enum Progress {
    Replies,
    Waiting,
    /// Replies and dead letters (the poison workload).
    RepliedOrDiverted,
    /// Replies and a peer's dead letters (after its `*_dead` on the same connection).
    PeerRepliedOrDead,
}

/// Polls until `total` messages are done, showing progress; the polls made (each a
/// read-only transaction of its own, taken off the commits the run is charged with).
pub(super) async fn drained(
    c: &tokio_postgres::Client,
    tag: &str,
    total: i64,
    started: Instant,
    progress: Progress,
) -> anyhow::Result<i64> {
    let mut shown = Instant::now();
    let mut polls = 0i64;
    loop {
        polls += 1;
        let done = match progress {
            Progress::Replies => c.query_one(stmt::REPLIES.sql, &[]).await?.get::<_, i64>(0),
            Progress::Waiting => total - c.query_one(stmt::WAITING.sql, &[]).await?.get::<_, i64>(0),
            Progress::RepliedOrDiverted => c.query_one(stmt::POISON_DONE.sql, &[]).await?.get::<_, i64>(0),
            Progress::PeerRepliedOrDead => c.query_one(stmt::PEER_POISON_DONE.sql, &[]).await?.get::<_, i64>(0),
        };
        if done >= total {
            return Ok(polls);
        }
        if shown.elapsed() > Duration::from_secs(1) {
            shown = Instant::now();
            super::progress(&format!("{tag}: {done}/{total} messages, {:.0} s", started.elapsed().as_secs_f64()));
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("{tag}: not drained after 30 minutes ({done} of {total})");
        }
        // Polling the database is how the drain is observed; it is not a measurement.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The headline's check: messages applied out of order, and whether every message took
/// effect exactly once with one reply.
pub(super) async fn verify_headline(c: &tokio_postgres::Client, shape: Shape) -> anyhow::Result<(i64, bool)> {
    let total = shape.messages() as i64;
    let v = c.query_one(stmt::VERIFY.sql, &[&(shape.per_group as i64)]).await?;
    let (incomplete, ooo, applied, replies, distinct): (i64, i64, i64, i64, i64) =
        (v.get(0), v.get(1), v.get(2), v.get(3), v.get(4));
    Ok((ooo, incomplete == 0 && applied == total && replies == total && distinct == total))
}
