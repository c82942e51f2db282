//! River (riverqueue 0.5) as a contender of `sbworker bench` (issue 10).
//!
//! ```text
//! river-bench migrate URL
//! river-bench preload URL GROUPS PER_GROUP MODE
//! river-bench work URL WORKERS POOL MODE GROUPS
//! ```
//!
//! `migrate` applies River's own migrations. `preload` inserts the headline's jobs with
//! River's client (`insert_many`, in order): one job per message, and the business row
//! of every group. `work` runs River's client until SIGTERM: each job applies its
//! message's effect (`bench.apply`) and completes itself in the same transaction
//! (`job_complete_tx`), then commits.
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
use riverqueue::{Client, InsertOpts, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome, Workers};
use serde::{Deserialize, Serialize};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One headline message: its group's conversation and its number in the group.
#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench_apply")]
struct Apply {
    c: String,
    s: i64,
}

async fn apply(context: WorkContext, job: Job<Apply>) -> Result<WorkOutcome, riverqueue::Error> {
    let client = context.client().expect("jobs worked by a client have a client");
    let pool = client.database().as_postgres().expect("the bench uses Postgres").pool().clone();
    let mut tx = riverqueue::database::begin_postgres(&pool).await?;
    sqlx::query("SELECT bench.apply($1::text::uuid, $2)").bind(&job.args.c).bind(job.args.s).execute(&mut *tx).await?;
    context.job_complete_tx(&mut tx).await?;
    tx.commit().await?;
    Ok(WorkOutcome::Complete)
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
    let url = args.get(2).ok_or("usage: river-bench migrate|preload|work URL …")?;
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
            let client = Client::builder(pool).build()?;
            // In order, group by group, as the other contenders' preloads: River claims a
            // queue's jobs by priority, scheduled time and id.
            let mut batch = Vec::with_capacity(1000);
            for (g, c) in &rows {
                for s in 1..=per_group {
                    batch.push((Apply { c: c.clone(), s }, InsertOpts::default().with_queue(queue_of(&mode, *g))));
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
            let mut builder = Client::builder(pool).workers(workers).fetch_cooldown(Duration::from_millis(1));
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
        _ => return Err("usage: river-bench migrate|preload|work URL …".into()),
    }
    Ok(())
}
