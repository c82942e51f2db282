//! `sbworker bench`: side-by-side measurements in one run on one throwaway
//! cluster. Contenders: sbworker on the PostgreSQL broker, sbworker on the SQL Server
//! transport through the emulator, the peers (graphile-worker, River, pgmq), and the
//! machine's limit (pgbench doing the same commits and row writes per message). Workloads: the burn-down (a preloaded backlog, a
//! handler that does nothing), the headline (groups of in-order messages, each handled
//! in one transaction with a business effect, verified afterwards for order and exactly
//! one effect), the open loop (fixed arrival rates, latency from each message's planned
//! send time), and the real pipeline with the payroll engine at several reader counts,
//! plus the engine alone. Repetitions are interleaved, each after a pgbench commit
//! calibration; the report gives medians with min and max, and ratios taken within a
//! repetition.
//!
//! Layout: [`world`] (cluster, databases, /proc figures), [`effect`] (the handler),
//! [`runs`] (one measured run), `limit` (the pgbench limits and the calibration),
//! `open_loop` (messages sent by plan), `install_peers` (the peers installed before
//! anything is measured), [`peers`] (graphile-worker, River and pgmq in every workload),
//! [`poison`] (workload 4: poison and bloat), [`pipeline`] (workload 5, the split
//! topology, the engine), [`plan`] (the steps and the time left), [`report`];
//! [`budget`] (the pipeline and the headline at fixed sizes, counted for the work budget);
//! [`web`] (the web page's pages at 100,000 keys and 10,000 dead letters).

pub mod budget;
pub mod effect;
mod install_peers;
mod limit;
mod open_loop;
pub mod peers;
pub mod pipeline;
pub mod plan;
pub mod poison;
pub mod report;
pub mod runs;
pub mod web;
pub mod world;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use pipeline::Track;
use runs::{Measured, Shape};

/// The bench's T-SQL statements (`crates/tools/sql/mssql/statements/bench.sql`).
pub use crate::statements::mssql_bench as tsql;
/// The bench's PostgreSQL statements (`crates/tools/sql/postgres/statements/bench.sql`).
pub use crate::statements::postgres_bench as stmt;

/// The bench's schema on the PostgreSQL broker, and the limit's tables.
const BENCH_SQL: &str = include_str!("../../sql/postgres/bench.sql");
const LIMIT_SQL: &str = include_str!("../../sql/postgres/bench_limit.sql");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Contender {
    SbworkerPostgres,
    SbworkerTds,
    Graphile,
    GraphileLocalQueue,
    River,
    RiverPerGroup,
    Pgmq,
    Limit,
}

impl Contender {
    /// The contender named by its key (`sbworker-pg`, `river-per-group`, ...).
    pub fn from_key(key: &str) -> Result<Contender, String> {
        Contender::ALL.into_iter().find(|c| c.key() == key).ok_or_else(|| {
            let keys: Vec<&str> = Contender::ALL.iter().map(|c| c.key()).collect();
            format!("no contender `{key}` (there are: {})", keys.join(", "))
        })
    }

    /// Every contender of the headline, in the order the runs interleave and the report lists.
    pub const ALL: [Contender; 8] = [
        Contender::SbworkerPostgres,
        Contender::SbworkerTds,
        Contender::Graphile,
        Contender::GraphileLocalQueue,
        Contender::River,
        Contender::RiverPerGroup,
        Contender::Pgmq,
        Contender::Limit,
    ];

    /// The peers: contenders installed from registries, left out by `--skip-peers`.
    pub fn is_peer(self) -> bool {
        matches!(
            self,
            Contender::Graphile
                | Contender::GraphileLocalQueue
                | Contender::River
                | Contender::RiverPerGroup
                | Contender::Pgmq
        )
    }

    pub fn key(self) -> &'static str {
        match self {
            Contender::SbworkerPostgres => "sbworker-pg",
            Contender::SbworkerTds => "sbworker-tds",
            Contender::Graphile => "graphile",
            Contender::GraphileLocalQueue => "graphile-localqueue",
            Contender::River => "river",
            Contender::RiverPerGroup => "river-per-group",
            Contender::Pgmq => "pgmq",
            Contender::Limit => "limit",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Contender::SbworkerPostgres => "sbworker, PostgreSQL broker",
            Contender::SbworkerTds => "sbworker, SQL Server transport via the emulator",
            Contender::Graphile => "graphile-worker 0.17.3 (7 jobs at once, pool 8, no local queue)",
            Contender::GraphileLocalQueue => "graphile-worker 0.17.3 (7 jobs at once, pool 8, local queue 50)",
            Contender::River => "River, riverqueue 0.5 (one queue, 7 workers, pool 8)",
            Contender::RiverPerGroup => "River, riverqueue 0.5 (a queue of 1 worker per group, pool 8)",
            Contender::Pgmq => "pgmq 1.11 (FIFO groups, read_grouped; 7 workers, pool 8)",
            Contender::Limit => "limit: pgbench, same commits and writes",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    BurnDown,
    Headline,
}

impl Workload {
    pub fn key(self) -> &'static str {
        match self {
            Workload::BurnDown => "burn-down",
            Workload::Headline => "headline",
        }
    }
}

/// A part of the bench, to run alone or with others (`--parts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    Headline,
    BurnDown,
    Poison,
    Bloat,
    OpenLoop,
    Pipeline,
    Split,
    Engine,
    Web,
}

impl Part {
    pub const ALL: [Part; 9] = [
        Part::Headline,
        Part::BurnDown,
        Part::Poison,
        Part::Bloat,
        Part::OpenLoop,
        Part::Pipeline,
        Part::Split,
        Part::Engine,
        Part::Web,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Part::Headline => "headline",
            Part::BurnDown => "burn-down",
            Part::Poison => "poison",
            Part::Bloat => "bloat",
            Part::OpenLoop => "open-loop",
            Part::Pipeline => "pipeline",
            Part::Split => "split",
            Part::Engine => "engine",
            Part::Web => "web",
        }
    }

    /// The part named by its key.
    pub fn from_key(key: &str) -> Result<Part, String> {
        Part::ALL.into_iter().find(|p| p.key() == key).ok_or_else(|| {
            let keys: Vec<&str> = Part::ALL.iter().map(|p| p.key()).collect();
            format!("no part `{key}` (there are: {})", keys.join(", "))
        })
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub quick: bool,
    pub out: PathBuf,
    pub reps: Option<usize>,
    /// Headline and burn-down: groups and messages per group (defaults by `quick`).
    pub groups: Option<i32>,
    pub per_group: Option<i32>,
    /// Leave out the peers installed from registries (graphile-worker): what the tests do.
    pub skip_peers: bool,
    /// Seconds each open-loop rate runs after its warm-up (default 60).
    pub open_loop_seconds: Option<f64>,
    /// The open loop's arrival rates (empty: 200, 1,000 and 2,000 per second).
    pub open_loop_rates: Vec<u32>,
    /// Seconds the bloat workload runs with xmin pinned (default 180).
    pub bloat_seconds: Option<f64>,
    /// The pipeline's readers take up to this many groups per transaction (default 1).
    pub groups_per_transaction: Option<u32>,
    /// The pipeline with conversation reuse, with this idle time (default: off).
    pub dialog_reuse_idle_seconds: Option<u32>,
    /// The pipeline's reader counts (empty: 1, 2, 4 and 8).
    pub pipeline_readers: Vec<u32>,
    /// Employees of the pipeline's roster (default 400).
    pub pipeline_employees: Option<usize>,
    /// The parts to run (empty: every part); the calibration runs in every repetition.
    pub parts: Vec<Part>,
    /// The contenders to run (empty: every one installed).
    pub contenders: Vec<Contender>,
}

impl Options {
    fn runs(&self, part: Part) -> bool {
        self.parts.is_empty() || self.parts.contains(&part)
    }

    fn takes(&self, contender: Contender) -> bool {
        self.contenders.is_empty() || self.contenders.contains(&contender)
    }
}

/// The sizes of every part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sizes {
    pub reps: usize,
    pub groups: i32,
    pub per_group: i32,
    pub readers: u32,
    pub connections: u32,
    pub calibration_seconds: u32,
    pub pipeline_employees: usize,
    pub pipeline_readers: Vec<u32>,
    pub engine_seconds: f64,
    pub open_loop_rates: Vec<u32>,
    pub open_loop_warmup_seconds: f64,
    pub open_loop_seconds: f64,
    /// The bloat workload: its backlog (groups × messages) and how long it runs.
    pub bloat_groups: i32,
    pub bloat_per_group: i32,
    pub bloat_seconds: f64,
    /// The pipeline's sbworker readers: groups per transaction (absent from older
    /// results: 1).
    #[serde(default = "one")]
    pub pipeline_groups_per_transaction: u32,
    /// The pipeline's collector readers: groups per transaction (absent from older
    /// results: 1).
    #[serde(default = "one")]
    pub pipeline_collector_groups_per_transaction: u32,
    /// The pipeline with conversation reuse: its idle time in seconds (absent: off).
    #[serde(default)]
    pub pipeline_dialog_reuse_idle_seconds: Option<u32>,
    /// The web page's database: keys and dead letters (absent from older results: 0).
    #[serde(default)]
    pub web_keys: usize,
    #[serde(default)]
    pub web_letters: usize,
}

fn one() -> u32 {
    1
}

impl Sizes {
    fn of(o: &Options) -> Sizes {
        let (reps, groups, per_group, calibration_seconds, pipeline_employees, pipeline_readers, engine_seconds) =
            if o.quick { (1, 16, 5, 1, 12, vec![1, 4], 0.2) } else { (3, 1000, 100, 10, 400, vec![1, 2, 4, 8], 3.0) };
        let (open_loop_rates, open_loop_warmup_seconds, open_loop_seconds) =
            if o.quick { (vec![50], 0.5, 1.0) } else { (vec![200, 1000, 2000], 10.0, 60.0) };
        // The bloat backlog outlasts the run: 1,200 messages a second, above the headline's
        // rate on 2 cores (a run that drains early says so).
        let bloat_seconds = o.bloat_seconds.unwrap_or(if o.quick { 3.0 } else { 180.0 });
        let (bloat_groups, bloat_per_group) =
            if o.quick { (16, 200) } else { (1000, ((bloat_seconds * 1.2).ceil() as i32).max(1)) };
        Sizes {
            reps: o.reps.unwrap_or(reps).max(1),
            groups: o.groups.unwrap_or(groups),
            per_group: o.per_group.unwrap_or(per_group),
            // The connection budget of every contender: 8, of which one LISTENs (sbworker's
            // side connection, graphile-worker's listener, River's notifier) and 7 work
            // (`Shape::readers_of`: through the emulator 4 readers of two connections).
            readers: 7,
            connections: 8,
            calibration_seconds,
            pipeline_employees: o.pipeline_employees.unwrap_or(pipeline_employees),
            pipeline_readers: if o.pipeline_readers.is_empty() { pipeline_readers } else { o.pipeline_readers.clone() },
            engine_seconds,
            open_loop_rates: if o.open_loop_rates.is_empty() { open_loop_rates } else { o.open_loop_rates.clone() },
            open_loop_warmup_seconds,
            open_loop_seconds: o.open_loop_seconds.unwrap_or(open_loop_seconds),
            bloat_groups,
            bloat_per_group,
            bloat_seconds,
            pipeline_groups_per_transaction: o.groups_per_transaction.unwrap_or(1),
            pipeline_collector_groups_per_transaction: crate::demo::COLLECTOR_GROUPS_PER_TRANSACTION,
            pipeline_dialog_reuse_idle_seconds: o.dialog_reuse_idle_seconds,
            web_keys: if o.quick { 10_000 } else { 100_000 },
            web_letters: if o.quick { 1_000 } else { 10_000 },
        }
    }
}

/// The pipeline's open loop runs with this many readers (when a closed run with as many
/// gave its capacity).
const OPEN_LOOP_READERS: u32 = 4;

/// The readers of sbworker's counting run: 4 (the targets' count) when the pipeline runs
/// with 4, else the most it runs with.
fn counting_readers(sizes: &Sizes) -> u32 {
    if sizes.pipeline_readers.contains(&OPEN_LOOP_READERS) {
        OPEN_LOOP_READERS
    } else {
        sizes.pipeline_readers.iter().copied().max().unwrap_or(OPEN_LOOP_READERS)
    }
}

/// The business limit's pgbench clients: the pipeline's 4 planners and the contenders'
/// connection budget. Each client edits and then stores, each with its commit's flush
/// waited for: with as many clients as a pipeline has connections, the limit has as much
/// concurrency to hide the flushes behind as the pipelines do. (In a trial on the shared
/// 2-core machine, 16 clients made about a tenth more requests a second than 8, and 4
/// about a quarter fewer.)
fn business_clients(sizes: &Sizes) -> u32 {
    sizes.connections + 4
}

/// Everything one bench run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub command: String,
    pub started: String,
    pub machine: String,
    pub settings: Vec<(String, String)>,
    pub sizes: Sizes,
    /// Commits per second per repetition (pgbench, one-row commits, 8 connections).
    pub calibrations: Vec<f64>,
    pub runs: Vec<Measured>,
    pub pipeline: Vec<pipeline::PipelineRun>,
    /// The pipeline's pgbench limit, once per repetition (absent from older results).
    #[serde(default)]
    pub pipeline_limit: Vec<pipeline::PipelineLimit>,
    /// The pipeline's business limit, once per repetition (absent from older results).
    #[serde(default)]
    pub business_limit: Vec<pipeline::BusinessLimit>,
    /// The pipeline's counting runs, once per bench (absent from older results, whose
    /// timed runs counted the work themselves).
    #[serde(default)]
    pub counting: Option<pipeline::Counting>,
    /// The pipeline in one database and split over two servers, per repetition (absent
    /// from older results).
    #[serde(default)]
    pub split: Vec<pipeline::SplitPair>,
    pub engine_per_second: Vec<f64>,
    pub open_loop: Vec<runs::OpenLoop>,
    pub poison: Vec<poison::PoisonRun>,
    pub bloat: Vec<poison::BloatRun>,
    /// The web page's pages at size, once per bench (absent from older results).
    #[serde(default)]
    pub web: Vec<web::PageTimes>,
    /// What was left out, and why.
    pub notes: Vec<String>,
}

/// One progress line on stderr (rewritten in place on a terminal).
pub fn progress(line: &str) {
    let mut err = std::io::stderr().lock();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{line}");
    } else {
        let _ = writeln!(err, "{line}");
    }
}

/// Writes the report and the plots into `out` again from an earlier run's `results.json`.
pub fn render(results: &Path, out: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results).with_context(|| format!("reading {}", results.display()))?;
    let r: Results = serde_json::from_str(&text)
        .with_context(|| format!("{} is not the results.json of an sbworker bench", results.display()))?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    report::write(out, &r)?;
    progress(&format!("report: {}", out.join("report.md").display()));
    Ok(())
}

/// Runs the bench; writes `report.md`, `results.json` and the plots into `opts.out`.
pub async fn run(opts: &Options) -> anyhow::Result<Results> {
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let sizes = Sizes::of(opts);
    let shape = Shape { groups: sizes.groups, per_group: sizes.per_group, readers: sizes.readers };
    anyhow::ensure!(
        shape.messages() % sizes.connections as u64 == 0,
        "groups × per-group must divide over {} pgbench clients",
        sizes.connections
    );
    let work = opts.out.join("work");
    std::fs::create_dir_all(&work)?;
    progress("starting the bench's PostgreSQL cluster (fsync on) ...");
    let w = world::World::start()?;
    let settings = w.settings().await?;
    // The split topology's two servers (the bench's settings and logical replication),
    // started before its first step, so that they idle through no other part.
    let mut split_world: Option<pipeline::SplitWorld> = None;
    let pg = w.database("bench_sbworker_pg", true, BENCH_SQL).await?;
    let tds = w.database("bench_sbworker_tds", true, BENCH_SQL).await?;
    let limit = w.database("bench_limit", false, LIMIT_SQL).await?;
    // sbworker's database on each transport.
    let sbworker_db = |c: Contender| {
        if c == Contender::SbworkerTds { ("bench_sbworker_tds", &tds) } else { ("bench_sbworker_pg", &pg) }
    };
    // The peers are installed (and their schemas migrated) before anything is measured.
    // (A peer none of whose contenders runs is not installed.)
    let skip = |a: Contender, b: Contender| opts.skip_peers || !(opts.takes(a) || opts.takes(b));
    let graphile = peer_world(
        &w,
        skip(Contender::Graphile, Contender::GraphileLocalQueue),
        "bench_graphile",
        runs::install_graphile(&work),
        runs::migrate_graphile,
    )
    .await?;
    let river = peer_world(
        &w,
        skip(Contender::River, Contender::RiverPerGroup),
        "bench_river",
        runs::install_river(&work),
        runs::migrate_river,
    )
    .await?;
    let pgmq = peer_world(
        &w,
        opts.skip_peers || !opts.takes(Contender::Pgmq),
        "bench_pgmq",
        runs::install_pgmq(&work),
        runs::migrate_pgmq,
    )
    .await?;
    let peers_notes: Vec<String> =
        [("graphile-worker", graphile.as_ref().err()), ("River", river.as_ref().err()), ("pgmq", pgmq.as_ref().err())]
            .into_iter()
            .filter_map(|(name, why)| why.map(|why| format!("{name}: {why}")))
            .collect();
    let mut results = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started: chrono_like_now(),
        machine: machine(),
        settings,
        sizes: sizes.clone(),
        calibrations: Vec::new(),
        runs: Vec::new(),
        pipeline: Vec::new(),
        pipeline_limit: Vec::new(),
        business_limit: Vec::new(),
        counting: None,
        split: Vec::new(),
        engine_per_second: Vec::new(),
        open_loop: Vec::new(),
        poison: Vec::new(),
        bloat: Vec::new(),
        web: Vec::new(),
        notes: peers_notes,
    };
    let left_out: Vec<&str> = Part::ALL.into_iter().filter(|&p| !opts.runs(p)).map(Part::key).collect();
    if !left_out.is_empty() {
        results.notes.push(format!("the parts {} (--parts)", left_out.join(", ")));
    }
    let not_taken: Vec<&str> = Contender::ALL.into_iter().filter(|&c| !opts.takes(c)).map(Contender::key).collect();
    if !not_taken.is_empty() {
        results.notes.push(format!("the contenders {} (--contenders)", not_taken.join(", ")));
    }
    // The installed peers; and the contenders of workloads 3 and 4: sbworker on both
    // transports, and the peers that keep order.
    let peers: Vec<peers::Peer> =
        Contender::ALL.into_iter().filter_map(|c| peers::Peer::of(&w, c, &graphile, &river, &pgmq)).collect();
    let subjects: Vec<runs::Subject> = [
        runs::Subject::Sbworker(Contender::SbworkerPostgres, "bench_sbworker_pg", &pg),
        runs::Subject::Sbworker(Contender::SbworkerTds, "bench_sbworker_tds", &tds),
    ]
    .into_iter()
    .chain(
        peers
            .iter()
            .filter(|p| matches!(p.contender, Contender::Graphile | Contender::RiverPerGroup | Contender::Pgmq))
            .map(runs::Subject::Peer),
    )
    .filter(|s| opts.takes(s.contender()))
    .collect();
    // Every step, in the order the loops below take them (each loop step starts one).
    let headline_contenders: Vec<Contender> = Contender::ALL
        .into_iter()
        .filter(|&c| opts.takes(c))
        .filter(|&c| {
            matches!(c, Contender::Limit | Contender::SbworkerPostgres | Contender::SbworkerTds)
                || peers.iter().any(|p| p.contender == c)
        })
        .collect();
    let mut steps = Vec::new();
    for rep in 1..=sizes.reps {
        let r = if sizes.reps > 1 { format!(", repetition {rep}/{}", sizes.reps) } else { String::new() };
        steps.push(plan::Step::fixed(
            "calibration",
            format!("commit calibration{r}"),
            sizes.calibration_seconds as f64,
        ));
        for sync in [true, false].into_iter().filter(|_| opts.runs(Part::Headline)) {
            for c in &headline_contenders {
                let on = if sync { "on" } else { "off" };
                steps.push(plan::Step::open("headline", format!("headline: {}, synchronous_commit {on}{r}", c.key())));
            }
        }
        for c in [Contender::SbworkerPostgres, Contender::SbworkerTds]
            .into_iter()
            .filter(|&c| opts.runs(Part::BurnDown) && opts.takes(c))
        {
            steps.push(plan::Step::open("burn-down", format!("burn-down: {}{r}", c.key())));
        }
        for s in subjects.iter().filter(|_| opts.runs(Part::Poison)) {
            steps.push(plan::Step::open("poison", format!("poison: {}{r}", s.contender().key())));
        }
        for s in subjects.iter().filter(|_| opts.runs(Part::Bloat)) {
            let label = format!("bloat with xmin pinned: {}{r}", s.contender().key());
            steps.push(plan::Step::fixed("bloat", label, sizes.bloat_seconds));
        }
        for rate in sizes.open_loop_rates.iter().filter(|_| opts.runs(Part::OpenLoop)) {
            for s in &subjects {
                let label = format!("open loop at {rate}/s: {}{r}", s.contender().key());
                steps.push(plan::Step::fixed(
                    "open-loop",
                    label,
                    sizes.open_loop_warmup_seconds + sizes.open_loop_seconds,
                ));
            }
        }
        if opts.runs(Part::Pipeline) {
            steps.push(plan::Step::open("pipeline", format!("pipeline limit: pgbench{r}")));
            steps.push(plan::Step::open("pipeline", format!("pipeline business limit: pgbench{r}")));
        }
        for readers in sizes.pipeline_readers.iter().filter(|_| opts.runs(Part::Pipeline)) {
            steps.push(plan::Step::open("pipeline", format!("pipeline: {readers} readers{r}")));
        }
        if opts.runs(Part::Pipeline) && sizes.pipeline_readers.contains(&OPEN_LOOP_READERS) {
            steps.push(plan::Step::open("pipeline", format!("pipeline: open loop at half capacity{r}")));
        }
        if opts.runs(Part::Pipeline) && river.is_ok() {
            steps.push(plan::Step::open("pipeline", format!("pipeline: River{r}")));
        }
        if opts.runs(Part::Split) {
            steps.push(plan::Step::open("pipeline", format!("pipeline in one database and split over two servers{r}")));
        }
        if opts.runs(Part::Engine) {
            steps.push(plan::Step::fixed("engine", format!("engine alone{r}"), sizes.engine_seconds));
        }
    }
    // The counting runs, once after the repetitions.
    if opts.runs(Part::Pipeline) {
        let readers = counting_readers(&sizes);
        steps.push(plan::Step::open("pipeline", format!("pipeline: {readers} readers, counting the work")));
        if river.is_ok() {
            steps.push(plan::Step::open("pipeline", "pipeline: River, counting the work".to_owned()));
        }
        steps.push(plan::Step::open("pipeline", "pipeline business limit: pgbench, counting the work".to_owned()));
    }
    if opts.runs(Part::Web) {
        steps.push(plan::Step::open(
            "web",
            format!("the web page at {} keys and {} dead letters", sizes.web_keys, sizes.web_letters),
        ));
    }
    let mut tracker = plan::Tracker::new(steps);
    for rep in 0..sizes.reps {
        tracker.next();
        results.calibrations.push(
            runs::calibrate(&w, "bench_limit", &limit, sizes.connections, sizes.calibration_seconds, &work).await?,
        );
        for sync in [true, false].into_iter().filter(|_| opts.runs(Part::Headline)) {
            // Interleaved: every contender once per repetition, in turn.
            for &contender in &headline_contenders {
                tracker.next();
                let m = match contender {
                    Contender::Limit => {
                        runs::limit(&w, "bench_limit", &limit, shape, sizes.connections, sync, rep, &work).await?
                    }
                    Contender::SbworkerPostgres | Contender::SbworkerTds => {
                        let (db, url) = sbworker_db(contender);
                        runs::sbworker(&w, db, url, contender, Workload::Headline, shape, sync, rep, &work).await?
                    }
                    peer => {
                        let Some(peer) = peers.iter().find(|p| p.contender == peer) else { continue };
                        // A peer that cannot finish (pgmq's read_grouped with a large backlog
                        // takes hours) is said in the report; the bench goes on.
                        match runs::peer(&w, peer, shape, sync, rep, &work).await {
                            Ok(m) => m,
                            Err(e) => {
                                progress(&format!("{}: {e:#}", peer.contender.key()));
                                results.notes.push(format!(
                                    "{}, headline, repetition {}: {e:#}",
                                    peer.contender.label(),
                                    rep + 1
                                ));
                                continue;
                            }
                        }
                    }
                };
                results.runs.push(m);
            }
        }
        for (db, url, contender) in [
            ("bench_sbworker_pg", &pg, Contender::SbworkerPostgres),
            ("bench_sbworker_tds", &tds, Contender::SbworkerTds),
        ]
        .into_iter()
        .filter(|&(_, _, c)| opts.runs(Part::BurnDown) && opts.takes(c))
        {
            tracker.next();
            results
                .runs
                .push(runs::sbworker(&w, db, url, contender, Workload::BurnDown, shape, true, rep, &work).await?);
        }
        for &subject in subjects.iter().filter(|_| opts.runs(Part::Poison)) {
            tracker.next();
            match poison::poison(&w, subject, shape, rep, &work).await {
                Ok(m) => results.poison.push(m),
                Err(e) if subject.contender().is_peer() => {
                    progress(&format!("{}: {e:#}", subject.contender().key()));
                    results.notes.push(format!(
                        "{}, poison, repetition {}: {e:#}",
                        subject.contender().label(),
                        rep + 1
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        let bloat_shape =
            Shape { groups: sizes.bloat_groups, per_group: sizes.bloat_per_group, readers: sizes.readers };
        let bloat_time = Duration::from_secs_f64(sizes.bloat_seconds);
        for &subject in subjects.iter().filter(|_| opts.runs(Part::Bloat)) {
            tracker.next();
            results.bloat.push(poison::bloat(&w, subject, bloat_shape, bloat_time, rep, &work).await?);
        }
        for &rate in sizes.open_loop_rates.iter().filter(|_| opts.runs(Part::OpenLoop)) {
            for &subject in &subjects {
                tracker.next();
                let run = runs::open_loop(
                    &w,
                    subject,
                    rate,
                    Duration::from_secs_f64(sizes.open_loop_warmup_seconds),
                    Duration::from_secs_f64(sizes.open_loop_seconds),
                    sizes.readers,
                    rep,
                    &work,
                )
                .await;
                match run {
                    Ok(m) => results.open_loop.push(m),
                    Err(e) if subject.contender().is_peer() => {
                        progress(&format!("{}: {e:#}", subject.contender().key()));
                        let label = subject.contender().label();
                        results.notes.push(format!("{label}, open loop at {rate}/s, repetition {}: {e:#}", rep + 1));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if opts.runs(Part::Pipeline) {
            tracker.next();
            let edits = crate::demo::default_edits(sizes.pipeline_employees) as u64;
            results.pipeline_limit.push(
                runs::pipeline_limit(
                    &w,
                    "bench_limit",
                    &limit,
                    sizes.pipeline_employees,
                    edits,
                    sizes.connections,
                    rep,
                    &work,
                )
                .await?,
            );
            tracker.next();
            results.business_limit.push(
                runs::business_limit(
                    &w,
                    sizes.pipeline_employees,
                    edits,
                    business_clients(&sizes),
                    rep,
                    Track::Top,
                    &work,
                )
                .await?,
            );
        }
        for &readers in sizes.pipeline_readers.iter().filter(|_| opts.runs(Part::Pipeline)) {
            tracker.next();
            results.pipeline.push(pipeline::run(&w, &sizes, readers, None, rep, Track::Top).await?);
        }
        // The open loop: 4 readers, the edits paced at half the rate the planners made
        // them in this repetition's closed run with 4 readers.
        let capacity = results
            .pipeline
            .iter()
            .find(|p| p.repetition == rep && p.peer.is_none() && p.paced.is_none() && p.readers == OPEN_LOOP_READERS)
            .map(|p| p.edit_rate);
        if let (true, Some(capacity)) = (opts.runs(Part::Pipeline), capacity) {
            tracker.next();
            let pace = Some(capacity / 2.0);
            let run = pipeline::run(&w, &sizes, OPEN_LOOP_READERS, pace, rep, Track::Top).await?;
            results.pipeline.push(run);
        }
        if let (true, Ok((bin, _))) = (opts.runs(Part::Pipeline), &river) {
            tracker.next();
            // River's workers and pool as in the headline: the bench's connection budget.
            let (workers, pool) = (sizes.readers, peers::POOL);
            let run = pipeline::river(&w, bin, sizes.pipeline_employees, (workers, pool), rep, &work, Track::Top).await;
            match run {
                Ok(p) => results.pipeline.push(p),
                Err(e) => {
                    progress(&format!("River pipeline: {e:#}"));
                    results.notes.push(format!("River, pipeline, repetition {}: {e:#}", rep + 1));
                }
            }
        }
        if opts.runs(Part::Split) {
            tracker.next();
            if split_world.is_none() {
                progress("starting the split topology's two PostgreSQL clusters (fsync on, wal_level=logical) ...");
                split_world = Some(pipeline::SplitWorld::start()?);
            }
            let sw = split_world.as_ref().expect("started above");
            results.split.push(pipeline::split_pair(sw, &sizes, OPEN_LOOP_READERS, rep).await?);
        }
        if opts.runs(Part::Engine) {
            tracker.next();
            results.engine_per_second.push(pipeline::engine_alone(Duration::from_secs_f64(sizes.engine_seconds))?);
        }
    }
    // The work per request, counted once: counts hold to a few percent between
    // repetitions (unlike rates), so one run per contender says it, and the repetitions
    // are not made longer by a run each. Repetition 1's roster and edits.
    if opts.runs(Part::Pipeline) {
        let mut counting = pipeline::Counting::default();
        tracker.next();
        counting.pipeline.push(pipeline::run(&w, &sizes, counting_readers(&sizes), None, 0, Track::All).await?);
        if let Ok((bin, _)) = &river {
            tracker.next();
            let (workers, pool) = (sizes.readers, peers::POOL);
            match pipeline::river(&w, bin, sizes.pipeline_employees, (workers, pool), 0, &work, Track::All).await {
                Ok(p) => counting.pipeline.push(p),
                Err(e) => {
                    progress(&format!("River pipeline, counting: {e:#}"));
                    results.notes.push(format!("River, pipeline, the counting run: {e:#}"));
                }
            }
        }
        tracker.next();
        let edits = crate::demo::default_edits(sizes.pipeline_employees) as u64;
        counting.business_limit = Some(
            runs::business_limit(&w, sizes.pipeline_employees, edits, business_clients(&sizes), 0, Track::All, &work)
                .await?,
        );
        results.counting = Some(counting);
    }
    // The web page, once: its times are of queries at size, not of rates.
    if opts.runs(Part::Web) {
        tracker.next();
        results.web = web::measure(&w, sizes.web_keys, sizes.web_letters).await?;
    }
    debug_assert_eq!(tracker.started(), tracker.total(), "the plan and the loops took different steps");
    report::write(&opts.out, &results)?;
    progress(&format!("report: {}", opts.out.join("report.md").display()));
    let _ = writeln!(std::io::stderr());
    Ok(results)
}

/// A peer's world, made before anything is measured: the peer installed (`install`
/// gives its path, or the reason it cannot be had), its database with the bench's
/// schema, and its own migration there. Left out with `--skip-peers`.
async fn peer_world(
    w: &world::World,
    skip: bool,
    db: &str,
    install: impl Future<Output = Result<PathBuf, String>>,
    migrate: impl AsyncFnOnce(&world::World, &str, &std::path::Path) -> anyhow::Result<()>,
) -> anyhow::Result<Result<(PathBuf, String), String>> {
    if skip {
        return Ok(Err("left out (--skip-peers, or none of its contenders in --contenders)".to_owned()));
    }
    let home = match install.await {
        Ok(home) => home,
        Err(why) => return Ok(Err(why)),
    };
    let url = w.database(db, true, BENCH_SQL).await?;
    migrate(w, db, &home).await?;
    Ok(Ok((home, url)))
}

/// The time now, UTC, as text (without a date crate: from the system clock).
fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = secs / 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", secs % 86_400 / 3600, secs % 3600 / 60)
}

/// Days since 1970-01-01 to (year, month, day) (the proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Cores and memory of this machine.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_owned())))
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem} memory")
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_become_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_789), (2026, 12, 2));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn the_t_sql_effect_calls_the_bench_procedure() {
        assert!(super::tsql::APPLY.sql.starts_with("EXEC bench.apply"));
    }
}
