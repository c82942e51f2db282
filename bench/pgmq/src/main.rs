//! pgmq with FIFO groups (the `pgmq` crate 0.33.7, whose embedded SQL is pgmq 1.11) as a
//! contender of `sbworker bench`.
//!
//! ```text
//! pgmq-bench migrate URL
//! pgmq-bench preload URL GROUPS PER_GROUP
//! pgmq-bench work URL WORKERS POOL
//! pgmq-bench send URL RATE TOTAL START_UNIX GROUPS
//! ```
//!
//! `migrate` installs pgmq's SQL with the crate (no extension) and creates the queue
//! `bench`. `preload` sends the headline's messages in order, group by group, each with
//! its group in the `x-pgmq-group` header (pgmq's FIFO groups), and the business row of
//! every group. `work` runs WORKERS workers on a pool of POOL connections until SIGTERM:
//! each reads one message with `pgmq.read_grouped` (the head of the oldest group whose
//! earlier messages are all done, invisible to others for 30 s), then applies its effect
//! (`bench.apply`) and deletes it in one transaction. A message marked poison (`p`, set by
//! the bench's poison workload) fails; after 3 reads (the attempts sbworker makes) it is
//! archived (pgmq's dead letter), else it becomes visible again after 20 ms, doubling, at
//! most 1 s (as sbworker's bench worker waits). An idle worker reads again after 1 ms.
//!
//! `send` is the open loop's sender: TOTAL messages at RATE per second by plan (message i
//! at START_UNIX + i / RATE, round-robin over GROUPS groups, on two connections), each
//! with `pgmq.send` and its planned time, from which the bench measures latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::postgres::PgPoolOptions;

type Error = Box<dyn std::error::Error + Send + Sync>;

const QUEUE: &str = "bench";
/// Reads of a message before it is archived: sbworker's attempts (`worker.max_attempts`).
const MAX_READS: i32 = 3;

/// One message: its group's conversation and its number in the group.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Apply {
    c: String,
    s: i64,
    /// Poison: the message fails every attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    p: bool,
    /// The open loop's planned send time (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<String>,
}

fn group_header(c: &str) -> serde_json::Value {
    serde_json::json!({ "x-pgmq-group": c })
}

async fn work(url: &str, workers: usize, pool_size: u32) -> Result<(), Error> {
    let pool = PgPoolOptions::new().max_connections(pool_size).connect(url).await?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                term.recv().await;
            }
            stop.store(true, Ordering::SeqCst);
        });
    }
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (pool, stop) = (pool.clone(), stop.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let row = sqlx::query("SELECT msg_id, read_ct, message FROM pgmq.read_grouped($1, 30, 1)")
                    .bind(QUEUE)
                    .fetch_optional(&pool)
                    .await?;
                let Some(row) = row else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let (id, reads): (i64, i32) = (row.get(0), row.get(1));
                let job: Apply = serde_json::from_value(row.get::<serde_json::Value, _>(2))?;
                if job.p {
                    if reads >= MAX_READS {
                        sqlx::query("SELECT pgmq.archive($1, $2)").bind(QUEUE).bind(id).execute(&pool).await?;
                    } else {
                        let wait = Duration::from_millis(20 << (reads.max(1) - 1).min(6)).min(Duration::from_secs(1));
                        tokio::time::sleep(wait).await;
                        sqlx::query("SELECT pgmq.set_vt($1, $2, 0)").bind(QUEUE).bind(id).execute(&pool).await?;
                    }
                    continue;
                }
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT bench.apply($1::text::uuid, $2, convert_to($3, 'UTF8'))")
                    .bind(&job.c)
                    .bind(job.s)
                    .bind(&job.t)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("SELECT pgmq.delete($1, $2)").bind(QUEUE).bind(id).execute(&mut *tx).await?;
                tx.commit().await?;
            }
            Ok::<(), Error>(())
        });
    }
    eprintln!("pgmq running ({workers} workers, pool {pool_size})");
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// The open loop's sends (see `send` above): two senders, message i by sender i mod 2.
async fn send(url: &str, rate: f64, total: u64, start_unix: f64, groups: u64) -> Result<(), Error> {
    const SENDERS: u64 = 2;
    let pool = PgPoolOptions::new().max_connections(SENDERS as u32).connect(url).await?;
    let conversations: Vec<String> =
        sqlx::query_scalar("SELECT md5('group ' || g)::uuid::text FROM generate_series(1, $1::bigint) g ORDER BY g")
            .bind(groups as i64)
            .fetch_all(&pool)
            .await?;
    let conversations = Arc::new(conversations);
    let now_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    let start = tokio::time::Instant::now() + Duration::from_secs_f64((start_unix - now_unix).max(0.0));
    let mut senders = tokio::task::JoinSet::new();
    for j in 0..SENDERS {
        let (pool, conversations) = (pool.clone(), conversations.clone());
        senders.spawn(async move {
            let mut i = j;
            while i < total {
                let offset = i as f64 / rate;
                tokio::time::sleep_until(start + Duration::from_secs_f64(offset)).await;
                let g = i % groups + 1;
                let c = conversations[(g - 1) as usize].clone();
                let job = Apply {
                    c: c.clone(),
                    s: (i / groups + 1) as i64,
                    p: false,
                    t: Some(format!("{:.6}", start_unix + offset)),
                };
                sqlx::query("SELECT pgmq.send($1, $2, $3)")
                    .bind(QUEUE)
                    .bind(serde_json::to_value(&job)?)
                    .bind(group_header(&c))
                    .execute(&pool)
                    .await?;
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

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, Error> {
    args.get(i).ok_or_else(|| format!("missing {what}"))?.parse().map_err(|_| format!("{what} must be a number").into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let url = args.get(2).ok_or("usage: pgmq-bench migrate|preload|work|send URL …")?;
    match args.get(1).map(String::as_str) {
        Some("migrate") => {
            let pool = PgPoolOptions::new().max_connections(2).connect(url).await?;
            pgmq::PGMQueueExt::new_with_pool(pool.clone()).await.install_sql_from_embedded().await?;
            sqlx::query("SELECT pgmq.create($1)").bind(QUEUE).execute(&pool).await?;
        }
        Some("preload") => {
            let (groups, per_group) = (arg::<i64>(&args, 3, "GROUPS")?, arg::<i64>(&args, 4, "PER_GROUP")?);
            let pool = PgPoolOptions::new().max_connections(2).connect(url).await?;
            sqlx::query(
                "INSERT INTO bench.account (conversation) SELECT md5('group ' || g)::uuid FROM generate_series(1, $1::bigint) g",
            )
            .bind(groups)
            .execute(&pool)
            .await?;
            let conversations: Vec<String> = sqlx::query_scalar(
                "SELECT md5('group ' || g)::uuid::text FROM generate_series(1, $1::bigint) g ORDER BY g",
            )
            .bind(groups)
            .fetch_all(&pool)
            .await?;
            // In order, group by group, as the other contenders' preloads, 1,000 a batch.
            let (mut msgs, mut headers) = (Vec::with_capacity(1000), Vec::with_capacity(1000));
            for c in &conversations {
                for s in 1..=per_group {
                    msgs.push(serde_json::to_value(Apply { c: c.clone(), s, p: false, t: None })?);
                    headers.push(group_header(c));
                    if msgs.len() == 1000 {
                        sqlx::query("SELECT pgmq.send_batch($1, $2, $3)")
                            .bind(QUEUE)
                            .bind(std::mem::take(&mut msgs))
                            .bind(std::mem::take(&mut headers))
                            .execute(&pool)
                            .await?;
                    }
                }
            }
            if !msgs.is_empty() {
                sqlx::query("SELECT pgmq.send_batch($1, $2, $3)")
                    .bind(QUEUE)
                    .bind(msgs)
                    .bind(headers)
                    .execute(&pool)
                    .await?;
            }
        }
        Some("work") => {
            let (workers, pool) = (arg::<usize>(&args, 3, "WORKERS")?, arg::<u32>(&args, 4, "POOL")?);
            work(url, workers, pool).await?;
        }
        Some("send") => {
            let (rate, total) = (arg::<f64>(&args, 3, "RATE")?, arg::<u64>(&args, 4, "TOTAL")?);
            let (start_unix, groups) = (arg::<f64>(&args, 5, "START_UNIX")?, arg::<u64>(&args, 6, "GROUPS")?);
            send(url, rate, total, start_unix, groups).await?;
        }
        _ => return Err("usage: pgmq-bench migrate|preload|work|send URL …".into()),
    }
    Ok(())
}
