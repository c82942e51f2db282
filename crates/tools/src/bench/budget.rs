//! The work budget's loads (the test `tests/work_budget.rs` holds the budget and fails
//! a run that exceeds it): the bench's real pipeline and its headline for sbworker on the
//! PostgreSQL broker, each at a fixed size on a cluster whose every statement is tracked,
//! and what each made the server do per request, counted by `pg_stat_statements` (as
//! [`super::pipeline::WorkPerRequest`]: statements the clients sent, statements run
//! inside them, shared buffers touched) and, for the headline, WAL bytes. Counts, not
//! rates: the machine's speed hardly moves them.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use tokio::process::Command;

use super::pipeline::WorkPerRequest;
use super::runs::{self, Progress, Shape};
use super::world::{self, World};
use super::{Contender, effect, stmt};
use crate::pg_cluster::Cluster;

/// What the budget's cluster adds to the bench's settings: every statement tracked,
/// nested ones too; and no autovacuum, so that no background vacuum writes WAL or
/// removes dead rows in the middle of a load (the loads are short: the broker's
/// tables do not bloat in them).
const COUNTING: [&str; 3] =
    ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all", "autovacuum=off"];

/// The longest a load may take: a stuck one fails instead of hanging.
const LOAD_LIMIT: Duration = Duration::from_secs(300);

/// A throwaway cluster with the bench's settings ([`world::SETTINGS`]) and
/// `COUNTING`; an error, saying so, when the installation has no
/// `pg_stat_statements` (found as [`World::start`] finds it).
pub fn world() -> anyhow::Result<World> {
    let postgres = Cluster::program("postgres")?;
    let lib = postgres
        .parent()
        .and_then(|bin| bin.parent())
        .map(|root| root.join("lib/pg_stat_statements.so"))
        .context("finding PostgreSQL's library folder")?;
    ensure!(
        lib.exists(),
        "the work budget counts with pg_stat_statements, which this PostgreSQL installation lacks ({} is \
         missing; Debian's postgresql package has it)",
        lib.display()
    );
    let mut settings = world::SETTINGS.to_vec();
    settings.extend(COUNTING);
    Ok(World { cluster: Cluster::start(&settings).context("starting the work budget's PostgreSQL cluster")? })
}

/// The pipeline's work, per request (the import's and the edits').
#[derive(Debug, Clone, Copy)]
pub struct PipelineWork {
    /// Requests sent: one per employee by the import, one per edit that changed the roster.
    pub requests: i64,
    pub work: WorkPerRequest,
}

/// The real pipeline as the bench runs it (`pipeline::run`): the demo on a new database
/// of `world`, `employees` employees imported in one transaction, then three edits per
/// employee by four planners, `readers` calculation readers and conversation reuse with
/// `reuse_idle_seconds`; the end state checked. Counted over the whole run, as the
/// bench counts it: the install, the import, the edits, the waits for the drain and the
/// end-state check.
pub async fn pipeline(
    world: &World,
    employees: usize,
    readers: u32,
    reuse_idle_seconds: u32,
) -> anyhow::Result<PipelineWork> {
    let url = world.cluster.create_database("budget_pipeline").await?;
    ensure!(runs::statements_reset(&url).await?, "pg_stat_statements is not loaded in the budget's cluster");
    let opts = crate::demo::Options {
        size: employees,
        edits: Some(crate::demo::default_edits(employees)),
        postgres: Some(url.clone()),
        readers,
        // The bench's first repetition's roster and edits.
        seed: 2026,
        mssql: false,
        progress: false,
        external_setup: None,
        pace: None,
        groups_per_transaction: 1,
        collector_groups_per_transaction: crate::demo::COLLECTOR_GROUPS_PER_TRANSACTION,
        dialog_reuse_idle_seconds: Some(reuse_idle_seconds),
        split: 0,
        calculation: Vec::new(),
    };
    let report = tokio::time::timeout(LOAD_LIMIT, crate::demo::run(&opts, &mut std::io::sink()))
        .await
        .context("the pipeline load did not end within 300 s")??;
    ensure!(report.verdict.problems.is_empty(), "the pipeline's end state is wrong: {:?}", report.verdict.problems);
    let requests = report.load.requests + report.burst.requests;
    let work = runs::statements_work(&url, true, requests as f64).await?.context("no statements counted")?;
    Ok(PipelineWork { requests, work })
}

/// The headline's work, per message.
#[derive(Debug, Clone, Copy)]
pub struct HeadlineWork {
    pub messages: u64,
    pub work: WorkPerRequest,
    /// WAL written by the whole cluster while the worker ran (the LSN's advance).
    pub wal_bytes: f64,
}

/// The bench's headline for sbworker on the PostgreSQL broker (`runs::sbworker`):
/// `shape`'s groups of in-order messages preloaded on a new database of `world`, then
/// worked off by `bin bench-worker` (the sbworker binary with the tools) with the
/// bench's effect handler, one message a transaction, durable commits; order and
/// exactly one effect checked. Counted from the worker's start to its exit; the
/// progress reads are left out of the counts (their session tracks nothing). Each
/// `run` has a database of its own.
pub async fn headline(world: &World, bin: &Path, shape: Shape, run: usize, dir: &Path) -> anyhow::Result<HeadlineWork> {
    let db = format!("budget_headline_{run}");
    let db = db.as_str();
    let url = world.database(db, true, super::BENCH_SQL).await?;
    {
        let c = runs::fresh(world, db, &url, stmt::RESET.sql, true).await?;
        runs::preload(&c, shape, &[b'x'; 100]).await?;
    }
    let (readers, _) = shape.readers_of(Contender::SbworkerPostgres);
    let config = dir.join(format!("budget-headline-{run}.toml"));
    std::fs::write(&config, runs::worker_config("postgres", &url, effect::NAME, readers, 1))?;
    let poller = world::connect(&format!("{url} options='-c pg_stat_statements.track=none'")).await?;

    let (_, wal0) = runs::reading(&url).await?;
    ensure!(runs::statements_reset(&url).await?, "pg_stat_statements is not loaded in the budget's cluster");
    let log = dir.join(format!("budget-headline-{run}.worker.log"));
    let worker = runs::Process::new(
        Command::new(bin)
            .arg("bench-worker")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} bench-worker", bin.display()))?,
    );
    let total = shape.messages() as i64;
    let drained = runs::drained(&poller, "work budget, headline", total, Instant::now(), Progress::Replies);
    match tokio::time::timeout(LOAD_LIMIT, drained).await {
        Ok(polls) => polls?,
        Err(_) => bail!("the headline load did not drain within 300 s (the worker's log: {})", log.display()),
    };
    worker.terminate().await?;
    let work = runs::statements_work(&url, true, total as f64).await?.context("no statements counted")?;
    let (_, wal1) = runs::reading(&url).await?;
    let (out_of_order, exactly_once) = runs::verify_headline(&poller, shape).await?;
    ensure!(
        out_of_order == 0 && exactly_once,
        "the headline broke: {out_of_order} messages out of order, exactly once: {exactly_once}"
    );
    Ok(HeadlineWork { messages: shape.messages(), work, wal_bytes: (wal1 - wal0) as f64 / total as f64 })
}
