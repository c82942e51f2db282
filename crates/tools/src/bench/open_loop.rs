//! The open loop: messages sent by plan at a fixed rate, latency from each message's
//! planned time, for sbworker and the peers.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::runs::{Progress, Shape, Subject, drained, unix_now};
use super::world::{self, World};
use super::{Contender, stmt};

/// Workload 3 at one rate: what was planned, sent and measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenLoop {
    pub contender: Contender,
    pub rate: u32,
    pub repetition: usize,
    pub warmup_seconds: f64,
    pub seconds: f64,
    /// Messages sent per second over the run (below `rate` when the senders fell behind
    /// their plan; latency still counts from the plan).
    pub sent_per_second: f64,
    /// Messages planned after the warm-up, whose latency is measured.
    pub measured: i64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The open loop's groups (dialogs on the broker, queues of the peers).
const OPEN_LOOP_GROUPS: i32 = 200;

/// The open loop: messages sent at `rate` per second by plan (message i at start + i /
/// rate, over 200 groups, by two sender connections: on 2 cores more send less, as
/// PostgreSQL serialises the commits of transactions that NOTIFY) to the contender with `readers`
/// readers (jobs at once); latency from each message's planned time (carried in its
/// body or payload) to its reply, for the messages planned after `warmup` (no
/// coordinated omission: a late send counts its lateness).
#[allow(clippy::too_many_arguments)]
pub async fn open_loop(
    world: &World,
    subject: Subject<'_>,
    rate: u32,
    warmup: Duration,
    duration: Duration,
    readers: u32,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<OpenLoop> {
    let c = subject.fresh(world, true).await?;
    let sends = match subject {
        Subject::Sbworker(..) => Some(Sends::Broker(std::sync::Arc::new(
            c.query(stmt::OPEN_DIALOGS.sql, &[&OPEN_LOOP_GROUPS]).await?.iter().map(|r| r.get(0)).collect(),
        ))),
        Subject::Peer(_) => None,
    };
    let tag = format!("open-loop-{}-{rate}-{repetition}", subject.contender().key());
    let shape = Shape { groups: OPEN_LOOP_GROUPS, per_group: 0, readers };
    let worker = subject.start(shape, dir, &tag).await?;
    let total = (f64::from(rate) * (warmup + duration).as_secs_f64()).round() as u64;
    // The plan starts a moment from now, so that every sender is connected by then.
    let start_unix = unix_now() + 0.5;
    match (sends, subject) {
        (Some(sends), _) => send_by_plan(subject.url(), sends, rate, total, start_unix).await?,
        (None, Subject::Peer(p)) => p.send_by_plan(rate, total, start_unix, OPEN_LOOP_GROUPS).await?,
        (None, Subject::Sbworker(..)) => unreachable!("sbworker's sends are the broker's"),
    }
    let sent_seconds = unix_now() - start_unix;
    drained(&c, &tag, total as i64, Instant::now(), Progress::Replies).await?;
    worker.terminate().await?;
    let row = c.query_one(stmt::LATENCY.sql, &[&(start_unix + warmup.as_secs_f64())]).await?;
    let m = OpenLoop {
        contender: subject.contender(),
        rate,
        repetition,
        warmup_seconds: warmup.as_secs_f64(),
        seconds: duration.as_secs_f64(),
        sent_per_second: total as f64 / sent_seconds,
        measured: row.get(0),
        p50_ms: row.get(1),
        p95_ms: row.get(2),
        p99_ms: row.get(3),
        max_ms: row.get(4),
    };
    super::progress(&format!("{tag}: p50 {:.1} ms, p99 {:.1} ms", m.p50_ms, m.p99_ms));
    Ok(m)
}

/// What the open loop's senders send: a message on the broker's dialogs (its body the
/// planned time), or a graphile-worker job of its group's queue (River sends with its
/// own client, in its harness).
pub(super) enum Sends {
    Broker(std::sync::Arc<Vec<uuid::Uuid>>),
    Graphile(std::sync::Arc<Vec<uuid::Uuid>>),
}

/// Sends `total` messages at `rate` per second by plan, message i at `start_unix` + i /
/// rate, by two sender connections; round-robin over the groups.
pub(super) async fn send_by_plan(
    url: &str,
    sends: Sends,
    rate: u32,
    total: u64,
    start_unix: f64,
) -> anyhow::Result<()> {
    const SENDERS: u64 = 2;
    let start = tokio::time::Instant::now() + Duration::from_secs_f64((start_unix - unix_now()).max(0.0));
    let sends = std::sync::Arc::new(sends);
    let mut senders = tokio::task::JoinSet::new();
    for j in 0..SENDERS {
        let (url, sends) = (url.to_owned(), sends.clone());
        senders.spawn(async move {
            let c = world::connect(&url).await?;
            let statement = c
                .prepare(match *sends {
                    Sends::Broker(_) => stmt::SEND_PLANNED.sql,
                    Sends::Graphile(_) => stmt::GRAPHILE_SEND.sql,
                })
                .await?;
            let mut i = j;
            while i < total {
                let offset = i as f64 / f64::from(rate);
                tokio::time::sleep_until(start + Duration::from_secs_f64(offset)).await;
                let planned = format!("{:.6}", start_unix + offset);
                match &*sends {
                    Sends::Broker(handles) => {
                        let h = handles[(i % handles.len() as u64) as usize];
                        c.execute(&statement, &[&h, &planned.as_bytes()]).await?;
                    }
                    Sends::Graphile(groups) => {
                        let n = groups.len() as u64;
                        let (g, seq) = ((i % n) as usize, (i / n + 1) as i64);
                        c.execute(&statement, &[&groups[g], &seq, &planned, &format!("g{}", g + 1)]).await?;
                    }
                }
                i += SENDERS;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = senders.join_next().await {
        r??;
    }
    Ok(())
}
