//! Workload 5, the real pipeline: roster commits to stored results with the payroll
//! engine (the demo's world, on the bench's cluster with durable commits), at several
//! reader counts; the same pipeline split over two servers joined by a route beside it
//! in one database of the same server ([`split_pair`]); and the engine alone: Vraags
//! decoded, calculated and answered per second on one core.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::world::World;
use crate::contract::{self, Limits};
use crate::engine::{self, Tables};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PipelineRun {
    /// The peer that worked the pipeline (`None`: sbworker on the PostgreSQL broker).
    #[serde(default)]
    pub peer: Option<String>,
    /// Readers of the calculation queue (a peer's: its workers).
    pub readers: u32,
    /// An open loop: the edits were paced at this many a second (`None`: the planners
    /// went as fast as they could).
    #[serde(default)]
    pub paced: Option<f64>,
    pub employees: usize,
    pub repetition: usize,
    /// The roster import: one transaction, one Vraag per employee.
    pub import_per_second: f64,
    /// The planner burst: edits from four planners at once. (Counted as the requests
    /// they sent: an edit that changes no roster row, such as removing a shift that is
    /// not there, sends none.)
    pub edits: i64,
    pub edits_per_second: f64,
    /// The planners' edits a second over the burst, every edit counted (absent from
    /// older results).
    #[serde(default)]
    pub edit_rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub verified: bool,
    /// The statements that took the server's time, per request (pg_stat_statements):
    /// top-level ones only in a timed run, nested ones too in a counting run (and in the
    /// timed runs of results from before the counting runs).
    pub statements: Vec<StatementTime>,
    /// The run's work per request, counted: in a counting run and the split part (and in
    /// the timed runs of results from before the counting runs); absent where
    /// pg_stat_statements is not installed.
    #[serde(default)]
    pub work: Option<WorkPerRequest>,
}

/// What a run made the server do per request, counted by `pg_stat_statements` over the
/// whole run (the import, the edits, the check of the end state): a change's effect on
/// the work shows here even where the machine's spread hides it in the rates.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WorkPerRequest {
    /// Statements the clients sent (each a round trip; BEGIN and COMMIT included).
    pub sent: f64,
    /// Statements run inside them: by functions and triggers.
    pub nested: f64,
    /// Shared buffers the sent statements touched (hit or read; their nested
    /// statements' included).
    pub buffers: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatementTime {
    pub statement: String,
    pub calls_per_request: f64,
    pub mean_ms: f64,
    pub ms_per_request: f64,
    /// Sent by a client (or run inside another statement: a function's, a trigger's).
    pub top_level: bool,
    /// Rows the statement returned or changed, per call (absent in older results).
    #[serde(default)]
    pub rows_per_call: Option<f64>,
}

/// The pipeline's limit in one repetition: pgbench doing each edit's minimal durable
/// work (the planner's, the worker's and the collector's transactions) with durable
/// commits.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PipelineLimit {
    pub repetition: usize,
    pub edits: u64,
    /// pgbench's clients (the bench's connection budget).
    pub clients: u32,
    pub per_second: f64,
    pub commits_per_edit: f64,
    pub wal_bytes_per_edit: f64,
}

/// The pipeline's business limit in one repetition: pgbench doing per edit what every
/// queue must do, with no queue (`bench_business_limit.pgbench`): the planner's edit,
/// whose commit builds and logs the Vraag with the roster's own SQL; then the engine's
/// answer for the key (computed once per key when the database is set up) stored by the
/// collector's own function, latest wins; two transactions, durable commits.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BusinessLimit {
    pub repetition: usize,
    /// The script's runs: edits tried (3 per employee, rounded up to whole rounds of its
    /// clients).
    pub edits: u64,
    /// Requests the edits sent (an edit that changes no roster row sends none), each
    /// answered and stored.
    pub requests: u64,
    /// pgbench's clients (the bench's connection budget).
    pub clients: u32,
    /// Requests answered and stored a second: the measure of the pipeline's edits/s.
    pub per_second: f64,
    pub commits_per_request: f64,
    pub wal_bytes_per_request: f64,
    /// The work per request, counted (the counting run only: the edits, without the
    /// setup's import).
    #[serde(default)]
    pub work: Option<WorkPerRequest>,
}

/// The runs that count the work per request, with nested statements tracked
/// (`pg_stat_statements.track = all`), once per bench after the timed repetitions: the
/// rates and latencies come from the timed runs, which track top-level statements only.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counting {
    /// sbworker's pipeline (4 readers) and River's pipeline, each run once more.
    pub pipeline: Vec<PipelineRun>,
    /// The business limit, run once more.
    #[serde(default)]
    pub business_limit: Option<BusinessLimit>,
}

/// How a run's statements are tracked (`pg_stat_statements.track`, for the sessions
/// that start after it is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// Top-level statements only: the timed runs. Tracking costs every statement it
    /// tracks time, so tracking nested ones too would tax each contender by how many it
    /// runs (sbworker's broker about three times as many as River's pipeline).
    Top,
    /// Nested statements too: the counting runs (their work per request, not their
    /// rates, is what they are for), and the split part, whose two arms are both
    /// sbworker's.
    All,
}

/// The demo pipeline with `readers` calculation readers, on a new database; with
/// `pace`, its edits sent at that rate by plan (an open loop); with `Track::All`, a
/// counting run.
pub async fn run(
    world: &World,
    sizes: &super::Sizes,
    readers: u32,
    pace: Option<f64>,
    repetition: usize,
    track: Track,
) -> anyhow::Result<PipelineRun> {
    let name = match (pace, track) {
        (_, Track::All) => format!("bench_pipeline_count_{readers}"),
        (None, Track::Top) => format!("bench_pipeline_{readers}_{repetition}"),
        (Some(_), Track::Top) => format!("bench_pipeline_open_{readers}_{repetition}"),
    };
    let employees = sizes.pipeline_employees;
    let url = world.cluster.create_database(&name).await?;
    let how = pace.map_or(String::new(), |p| format!(", edits paced at {p:.0}/s"));
    let counting = if track == Track::All { ", counting the work" } else { "" };
    super::progress(&format!("pipeline: {employees} employees, {readers} readers{how}{counting}"));
    let mut opts = demo_options(employees, url, readers, repetition);
    opts.pace = pace;
    opts.groups_per_transaction = sizes.pipeline_groups_per_transaction;
    opts.collector_groups_per_transaction = sizes.pipeline_collector_groups_per_transaction;
    opts.dialog_reuse_idle_seconds = sizes.pipeline_dialog_reuse_idle_seconds;
    measured(opts, None, repetition, track).await
}

/// The same pipeline worked by River (`bench/river`, `pipeline`): the roster's commit
/// trigger inserts a River job per Vraag (`bench_river_pipeline.sql`), `workers` River
/// workers on a pool of `pool` run sbworker's engine and store with the same
/// latest-wins rule. With `Track::All`, a counting run.
pub async fn river(
    world: &World,
    river: &Path,
    employees: usize,
    (workers, pool): (u32, u32),
    repetition: usize,
    dir: &Path,
    track: Track,
) -> anyhow::Result<PipelineRun> {
    let which = match track {
        Track::Top => repetition.to_string(),
        Track::All => "count".to_owned(),
    };
    let name = format!("bench_pipeline_river_{which}");
    let url = world.cluster.create_database(&name).await?;
    let counting = if track == Track::All { ", counting the work" } else { "" };
    super::progress(&format!("pipeline: {employees} employees, River with {workers} workers{counting}"));
    super::runs::migrate_river(world, &name, river).await?;
    if track == Track::All {
        // Before River's workers open their sessions: the setting holds for new ones only.
        // (Set after them, as it was before the counting runs, it left the stores of the
        // sessions River opened first uncounted: 47 nested statements a request against
        // 61, at 200 employees.)
        super::runs::statements_track_all(&url).await?;
    }
    let log_name = format!("pipeline-river-{which}.log");
    let log = std::fs::File::create(dir.join(&log_name))?;
    let child = tokio::process::Command::new(river)
        .args(["pipeline", &super::runs::node_url(world, &name), &workers.to_string(), &pool.to_string()])
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting River's pipeline workers")?;
    let mut process = super::runs::Process::new(child);
    let mut opts = demo_options(employees, url, workers, repetition);
    opts.external_setup = Some(RIVER_PIPELINE_SQL.to_owned());
    // Workers that exit on their own would leave the demo waiting out its limit for a
    // drain that cannot come: that ends the run at once, with where their log is.
    let run = tokio::select! {
        run = measured(opts, Some(RIVER.to_owned()), repetition, track) => run?,
        status = process.exited() => anyhow::bail!(
            "River's pipeline workers exited ({}) before the pipeline drained: see {}",
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            dir.join(&log_name).display()
        ),
    };
    process.terminate().await?;
    Ok(run)
}

/// The River pipeline's peer name in the report.
pub const RIVER: &str = "River 0.5";

const RIVER_PIPELINE_SQL: &str = include_str!("../../sql/postgres/bench_river_pipeline.sql");

fn demo_options(employees: usize, url: String, readers: u32, repetition: usize) -> crate::demo::Options {
    crate::demo::Options {
        size: employees,
        edits: Some(crate::demo::default_edits(employees)),
        postgres: Some(url),
        readers,
        seed: 2026 + repetition as u64,
        mssql: false,
        progress: false,
        external_setup: None,
        pace: None,
        groups_per_transaction: 1,
        collector_groups_per_transaction: crate::demo::COLLECTOR_GROUPS_PER_TRANSACTION,
        dialog_reuse_idle_seconds: None,
        split: 0,
        calculation: Vec::new(),
    }
}

/// The split topology's servers: the roster's and one calculation server, each with the
/// bench's settings and logical replication (which carries the route). The single
/// arm runs on the roster's server too, so the two arms differ by the route alone.
pub struct SplitWorld {
    pub roster: World,
    pub calculation: World,
}

/// What the split topology's servers add to the bench's settings.
const LOGICAL: [&str; 3] = ["wal_level=logical", "max_replication_slots=10", "max_wal_senders=10"];

impl SplitWorld {
    pub fn start() -> anyhow::Result<SplitWorld> {
        Ok(SplitWorld { roster: World::start_with(&LOGICAL)?, calculation: World::start_with(&LOGICAL)? })
    }
}

/// One repetition of the split topology against one database: the same pipeline, the
/// same readers, on servers with the same settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitPair {
    pub repetition: usize,
    /// Both services in one database on the roster's server.
    pub single: PipelineRun,
    /// The roster on its server, the calculation on the other, joined by a route each
    /// way; the work counted on both servers.
    pub split: PipelineRun,
}

/// The pipeline in one database, then split over two servers (`demo --split 1` on
/// databases the bench gives it), `readers` calculation readers each.
pub async fn split_pair(
    sw: &SplitWorld,
    sizes: &super::Sizes,
    readers: u32,
    repetition: usize,
) -> anyhow::Result<SplitPair> {
    let employees = sizes.pipeline_employees;
    super::progress(&format!("pipeline in one database: {employees} employees, {readers} readers"));
    let url = sw.roster.cluster.create_database(&format!("bench_split_single_{repetition}")).await?;
    let single = measured(demo_options(employees, url, readers, repetition), None, repetition, Track::All).await?;
    super::progress(&format!("pipeline split over two servers: {employees} employees, {readers} readers"));
    let roster = sw.roster.cluster.create_database(&format!("bench_split_roster_{repetition}")).await?;
    let calc = sw.calculation.cluster.create_database(&format!("bench_split_calc_{repetition}")).await?;
    let mut opts = demo_options(employees, roster, readers, repetition);
    opts.split = 1;
    opts.calculation = vec![calc];
    let split = measured(opts.clone(), None, repetition, Track::All).await?;
    unlink(opts.postgres.as_deref().unwrap_or_default(), &opts.calculation).await?;
    Ok(SplitPair { repetition, single, split })
}

/// Takes a split repetition's routes down (subscriptions, then slots, on every side), so
/// that no apply worker, slot or walsender of it runs beside what the bench measures next.
async fn unlink(roster: &str, calculation: &[String]) -> anyhow::Result<()> {
    let all: Vec<&str> = std::iter::once(roster).chain(calculation.iter().map(String::as_str)).collect();
    for url in &all {
        super::world::connect(url).await?.batch_execute(super::stmt::SPLIT_DROP_SUBSCRIPTIONS.sql).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for url in &all {
        let c = super::world::connect(url).await?;
        loop {
            c.query(super::stmt::SPLIT_DROP_SLOTS.sql, &[]).await?;
            let left: i64 = c.query_one(super::stmt::SPLIT_SLOTS_LEFT.sql, &[]).await?.get(0);
            if left == 0 {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the split repetition's slots are still held after 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Runs the demo with `opts` on its database (and its calculation databases, when
/// split), its statements counted on each: with `Track::All` nested ones too, and the
/// work per request recorded; with `Track::Top` the top-level statements' times only.
async fn measured(
    opts: crate::demo::Options,
    peer: Option<String>,
    repetition: usize,
    track: Track,
) -> anyhow::Result<PipelineRun> {
    let url = opts.postgres.as_deref().expect("the bench gives the demo its database");
    let mut pgss = super::runs::statements_reset(url).await?;
    for calc in &opts.calculation {
        pgss &= super::runs::statements_reset(calc).await?;
    }
    if pgss && track == Track::All {
        // Nested statements too (the demo's sessions start after this).
        for u in std::iter::once(url).chain(opts.calculation.iter().map(String::as_str)) {
            super::runs::statements_track_all(u).await?;
        }
    }
    let report = crate::demo::run(&opts, &mut std::io::sink()).await?;
    let requests = (report.load.requests + report.burst.requests).max(1) as f64;
    let statements = super::runs::statements_top(url, pgss, requests).await?;
    // The work needs the nested statements: a timed run records none.
    let counted = pgss && track == Track::All;
    let mut work = super::runs::statements_work(url, counted, requests).await?;
    // Split: the work of every server, added up.
    for calc in &opts.calculation {
        if let (Some(w), Some(c)) = (work.as_mut(), super::runs::statements_work(calc, counted, requests).await?) {
            w.sent += c.sent;
            w.nested += c.nested;
            w.buffers += c.buffers;
        }
    }
    let per_second = |n: i64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    Ok(PipelineRun {
        peer,
        readers: opts.readers,
        paced: opts.pace,
        employees: opts.size,
        repetition,
        import_per_second: per_second(report.load.requests, report.load.seconds),
        edits: report.burst.requests,
        edits_per_second: per_second(report.burst.requests, report.burst.seconds),
        edit_rate: per_second(opts.edits.unwrap_or(0) as i64, report.burst.seconds),
        p50_ms: report.burst.p50_ms,
        p99_ms: report.burst.p99_ms,
        verified: report.verdict.problems.is_empty(),
        statements,
        work,
    })
}

/// Vraags per second on one core: decode, calculate, encode the Antwoord, for `how_long`.
pub fn engine_alone(how_long: Duration) -> anyhow::Result<f64> {
    let tables = Arc::new(Tables::built_in()?);
    let limits = Limits::default();
    let bodies: [&[u8]; 2] = [
        include_bytes!("../../../../schemas/examples/valid/vraag-maand.xml"),
        include_bytes!("../../../../schemas/examples/valid/vraag-voorbeeld1.xml"),
    ];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < how_long {
        for body in bodies {
            let v = contract::decode_vraag(body, &limits)?;
            let c = engine::calculate(&v, &tables, false)?;
            std::hint::black_box(contract::encode_antwoord(&c.antwoord));
            n += 1;
        }
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
