//! River (riverqueue 0.5) as a contender of `sbworker bench`.
//!
//! ```text
//! river-bench migrate URL
//! river-bench preload URL GROUPS PER_GROUP MODE
//! river-bench work URL WORKERS POOL MODE GROUPS
//! river-bench send URL RATE TOTAL START_UNIX GROUPS MODE
//! river-bench pipeline URL WORKERS POOL
//! ```
//!
//! `migrate` applies River's own migrations. `preload` inserts the headline's jobs with
//! River's client (`insert_many`, in order): one job per message, and the business row
//! of every group. `work` runs River's client until SIGTERM: each job applies its
//! message's effect (`bench.apply`) and completes itself in the same transaction
//! (`job_complete_tx`), then commits. A job marked poison (`p`, set by the bench's
//! poison workload) fails every attempt; after 3 attempts (the attempts sbworker makes)
//! River discards it. Retries wait as sbworker's bench worker does: 20 ms, doubling, at
//! most 1 s (River's default policy would wait 1 s, then 16 s).
//!
//! `send` is the open loop's sender: TOTAL jobs at RATE per second by plan (job i at
//! START_UNIX + i / RATE, round-robin over GROUPS groups, on two connections), each
//! inserted with River's client (which notifies the workers) and carrying its planned
//! time, from which the bench measures latency.
//!
//! `pipeline` works the River pipeline until SIGTERM: the roster's commit trigger
//! inserted a job per Vraag (`crates/tools/sql/postgres/bench_river_pipeline.sql`), in
//! the queue `rekenserver` worked by WORKERS workers. Each job runs sbworker's engine
//! (the same crate the worker ships) on its Vraag and, in one transaction, stores the
//! result with the collector's latest-wins store (`rekenserver.sla_antwoord_op`: a newer
//! version is never overwritten, so no per-key order is needed) or records the Fout, and
//! completes itself.
//!
//! MODE `one`: every job in one queue worked by WORKERS workers (River's ordinary use;
//! it does not keep a group's jobs in order). MODE `per-group`: a queue per group with
//! one worker each, which keeps a group's jobs in order (River's open-source client has
//! no per-key serialisation of its own). Both on a pool of POOL connections, with
//! River's fetch cooldown at its minimum (1 ms, default 100 ms) so that fetching does
//! not cap throughput; the other settings are River's defaults.

use std::time::Duration;

use riverqueue::migrate::PostgresMigrator;
use riverqueue::sqlx::{self, postgres::PgPoolOptions};
use riverqueue::{
    Client, InsertOpts, Job, JobArgs, JobRow, QueueConfig, RetryPolicy, WorkContext, WorkError, WorkOutcome, Workers,
};
use serde::{Deserialize, Serialize};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One headline message: its group's conversation and its number in the group.
#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench_apply")]
struct Apply {
    c: String,
    s: i64,
    /// Poison: the job fails every attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    p: bool,
    /// The open loop's planned send time (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<String>,
}

/// One key's Vraag, inserted by the roster's commit trigger: the log's key (`h`, a dialog
/// handle's stand-in) and the Vraag's text (`v`).
#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "rekenserver_vraag")]
struct Vraag {
    h: String,
    v: String,
}

/// The engine's tables and limits, made once for the process.
fn engine() -> &'static (sbworker_core::engine::Tables, sbworker_core::contract::Limits) {
    static ENGINE: std::sync::OnceLock<(sbworker_core::engine::Tables, sbworker_core::contract::Limits)> =
        std::sync::OnceLock::new();
    ENGINE.get_or_init(|| {
        let tables = sbworker_core::engine::Tables::built_in().expect("the built-in rate tables load");
        (tables, sbworker_core::contract::Limits::default())
    })
}

/// A Vraag worked: computed, then stored (or its Fout recorded) and completed in one
/// transaction.
async fn bereken(context: WorkContext, job: Job<Vraag>) -> Result<WorkOutcome, Error> {
    use sbworker_core::{contract, engine};
    let (tables, limits) = engine();
    let computed = contract::decode_vraag(job.args.v.as_bytes(), limits)
        .map_err(|e| format!("unreadable Vraag: {e}"))
        .and_then(|v| engine::calculate(&v, tables, false).map_err(|e| format!("{e}")));
    let client = context.client().expect("jobs worked by a client have a client");
    let pool = client.database().as_postgres().expect("the bench uses Postgres").pool().clone();
    let mut tx = riverqueue::database::begin_postgres(&pool).await?;
    match computed {
        Ok(c) => {
            let a = &c.antwoord;
            let kaart: Vec<i32> = a.mutaties.iter().map(|m| m.kaart_soort).collect();
            let codes: Vec<&str> = a.mutaties.iter().map(|m| m.loonfactor_code.as_str()).collect();
            let waarden: Vec<String> = a.mutaties.iter().map(|m| m.waarde.to_string()).collect();
            sqlx::query(
                "SELECT rekenserver.sla_antwoord_op($1::text::uuid, $2::text::uuid, $3, $4, $5, false, $6, $7, \
                 $8::text[]::numeric[], $9)",
            )
            .bind(&job.args.h)
            .bind(a.id.to_string())
            .bind(a.dienstverband_id)
            .bind(a.periode_id)
            .bind(a.versie)
            .bind(&kaart)
            .bind(&codes)
            .bind(&waarden)
            .bind(&a.rekenversie)
            .execute(&mut *tx)
            .await?;
        }
        Err(reason) => {
            sqlx::query("SELECT rekenserver.noteer_fout($1::text::uuid, $2, false)")
                .bind(&job.args.h)
                .bind(&reason)
                .execute(&mut *tx)
                .await?;
        }
    }
    context.job_complete_tx(&mut tx).await?;
    tx.commit().await?;
    Ok(WorkOutcome::Complete)
}

/// The attempts of a job before River discards it: sbworker's (`worker.max_attempts`).
const MAX_ATTEMPTS: i32 = 3;

/// Retries as the bench's sbworker worker makes them: 20 ms, doubling, at most 1 s.
struct BenchRetry;

impl RetryPolicy for BenchRetry {
    fn next_retry(&self, job: &JobRow, _: &WorkError, _: riverqueue::jiff::Timestamp) -> Duration {
        let doublings = u32::try_from(job.attempt.max(1) - 1).unwrap_or(0).min(6);
        Duration::from_millis(20 << doublings).min(Duration::from_secs(1))
    }
}

async fn apply(context: WorkContext, job: Job<Apply>) -> Result<WorkOutcome, Error> {
    if job.args.p {
        return Err(format!("bench: job {} of {} is poison", job.args.s, job.args.c).into());
    }
    let client = context.client().expect("jobs worked by a client have a client");
    let pool = client.database().as_postgres().expect("the bench uses Postgres").pool().clone();
    let mut tx = riverqueue::database::begin_postgres(&pool).await?;
    sqlx::query("SELECT bench.apply($1::text::uuid, $2, convert_to($3, 'UTF8'))")
        .bind(&job.args.c)
        .bind(job.args.s)
        .bind(&job.args.t)
        .execute(&mut *tx)
        .await?;
    context.job_complete_tx(&mut tx).await?;
    tx.commit().await?;
    Ok(WorkOutcome::Complete)
}

/// The open loop's sends (see `send` above): two senders, job i by sender i mod 2.
async fn send(url: &str, rate: f64, total: u64, start_unix: f64, groups: u64, mode: &str) -> Result<(), Error> {
    const SENDERS: u64 = 2;
    let pool = PgPoolOptions::new().max_connections(SENDERS as u32).connect(url).await?;
    // The groups' conversations, as the bench names them: md5('group ' || g).
    let conversations: Vec<String> =
        sqlx::query_scalar("SELECT md5('group ' || g)::uuid::text FROM generate_series(1, $1::bigint) g ORDER BY g")
            .bind(groups as i64)
            .fetch_all(&pool)
            .await?;
    let conversations = std::sync::Arc::new(conversations);
    let client = Client::builder(pool).default_max_attempts(MAX_ATTEMPTS).build()?;
    let now_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    let start = tokio::time::Instant::now() + Duration::from_secs_f64((start_unix - now_unix).max(0.0));
    let mut senders = tokio::task::JoinSet::new();
    for j in 0..SENDERS {
        let (client, mode, conversations) = (client.clone(), mode.to_owned(), conversations.clone());
        senders.spawn(async move {
            let mut i = j;
            while i < total {
                let offset = i as f64 / rate;
                tokio::time::sleep_until(start + Duration::from_secs_f64(offset)).await;
                let g = i % groups + 1;
                let c = conversations[(g - 1) as usize].clone();
                let job = Apply { c, s: (i / groups + 1) as i64, p: false, t: Some(format!("{:.6}", start_unix + offset)) };
                client.insert(job).opts(InsertOpts::default().with_queue(queue_of(&mode, g as i64))).await?;
                i += SENDERS;
            }
            Ok::<(), Error>(())
        });
    }
    while let Some(r) = senders.join_next().await {
        r??;
    }
    Ok(())
}

fn queue_of(mode: &str, group: i64) -> String {
    if mode == "per-group" { format!("g{group}") } else { "bench".to_owned() }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, Error> {
    args.get(i).ok_or_else(|| format!("missing {what}"))?.parse().map_err(|_| format!("{what} must be a number").into())
}

fn mode(args: &[String], i: usize) -> Result<String, Error> {
    match args.get(i).map(String::as_str) {
        Some(m @ ("one" | "per-group")) => Ok(m.to_owned()),
        _ => Err("MODE must be `one` or `per-group`".into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(2).ok_or("usage: river-bench migrate|preload|work|send|pipeline URL …")?;
    match args.get(1).map(String::as_str) {
        Some("migrate") => {
            let pool = PgPoolOptions::new().max_connections(2).connect(url).await?;
            PostgresMigrator::new(pool).migrate_up().await?;
        }
        Some("preload") => {
            let (groups, per_group) = (arg::<i64>(&args, 3, "GROUPS")?, arg::<i64>(&args, 4, "PER_GROUP")?);
            let mode = mode(&args, 5)?;
            let pool = PgPoolOptions::new().max_connections(2).connect(url).await?;
            sqlx::query(
                "INSERT INTO bench.account (conversation) SELECT md5('group ' || g)::uuid FROM generate_series(1, $1::bigint) g",
            )
            .bind(groups)
            .execute(&pool)
            .await?;
            let rows: Vec<(i64, String)> = sqlx::query_as(
                "SELECT g, md5('group ' || g)::uuid::text FROM generate_series(1, $1::bigint) g ORDER BY g",
            )
            .bind(groups)
            .fetch_all(&pool)
            .await?;
            let client = Client::builder(pool).default_max_attempts(MAX_ATTEMPTS).build()?;
            // In order, group by group, as the other contenders' preloads: River claims a
            // queue's jobs by priority, scheduled time and id.
            let mut batch = Vec::with_capacity(1000);
            for (g, c) in &rows {
                for s in 1..=per_group {
                    batch.push((Apply { c: c.clone(), s, p: false, t: None }, InsertOpts::default().with_queue(queue_of(&mode, *g))));
                    if batch.len() == 1000 {
                        client.insert_many(std::mem::take(&mut batch)).await?;
                    }
                }
            }
            if !batch.is_empty() {
                client.insert_many(batch).await?;
            }
        }
        Some("work") => {
            let (workers_n, pool_n) = (arg::<usize>(&args, 3, "WORKERS")?, arg::<u32>(&args, 4, "POOL")?);
            let mode = mode(&args, 5)?;
            let groups = arg::<i64>(&args, 6, "GROUPS")?;
            let pool = PgPoolOptions::new().max_connections(pool_n).connect(url).await?;
            let mut workers = Workers::new();
            workers.add_fn(apply)?;
            let mut builder = Client::builder(pool)
                .workers(workers)
                .fetch_cooldown(Duration::from_millis(1))
                .retry_policy(BenchRetry);
            if mode == "per-group" {
                for g in 1..=groups {
                    builder = builder.queue(queue_of(&mode, g), QueueConfig::new(1));
                }
            } else {
                builder = builder.queue("bench", QueueConfig::new(workers_n));
            }
            let client = builder.build()?;
            let mut run = client.start_with_graceful_stop(async {
                if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    term.recv().await;
                }
            })?;
            eprintln!("river running ({mode}, {workers_n} workers, pool {pool_n})");
            run.wait().await?;
        }
        Some("pipeline") => {
            let (workers_n, pool_n) = (arg::<usize>(&args, 3, "WORKERS")?, arg::<u32>(&args, 4, "POOL")?);
            let pool = PgPoolOptions::new().max_connections(pool_n).connect(url).await?;
            let mut workers = Workers::new();
            workers.add_fn(bereken)?;
            let client = Client::builder(pool)
                .workers(workers)
                .fetch_cooldown(Duration::from_millis(1))
                .retry_policy(BenchRetry)
                .queue("rekenserver", QueueConfig::new(workers_n))
                .build()?;
            let mut run = client.start_with_graceful_stop(async {
                if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    term.recv().await;
                }
            })?;
            eprintln!("river pipeline running ({workers_n} workers, pool {pool_n})");
            run.wait().await?;
        }
        Some("send") => {
            let (rate, total) = (arg::<f64>(&args, 3, "RATE")?, arg::<u64>(&args, 4, "TOTAL")?);
            let start_unix = arg::<f64>(&args, 5, "START_UNIX")?;
            let (groups, mode) = (arg::<u64>(&args, 6, "GROUPS")?, mode(&args, 7)?);
            send(url, rate, total, start_unix, groups, &mode).await?;
        }
        _ => return Err("usage: river-bench migrate|preload|work|send|pipeline URL …".into()),
    }
    Ok(())
}
