//! Workload 4 of `sbworker bench`: poison and bloat, for sbworker (either transport)
//! and the peers that keep order. Poison: the headline with 1% of its messages failing
//! every time; sbworker must divert each of them (dead-letter table) without disabling
//! the queue or holding up the other groups; a peer fails them for good after the same
//! attempts and goes on with the rest of their groups. Bloat: the headline over a large
//! backlog for a fixed time while another transaction pins xmin, so no dead tuple can
//! be vacuumed; throughput at the start and at the end, and the dead tuples left.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::runs::{self, Progress, Shape, Subject, unix_now};
use super::world::{self, World};
use super::{Contender, stmt};

/// What the poison run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoisonRun {
    pub contender: Contender,
    pub repetition: usize,
    pub messages: u64,
    /// Messages made poison (1%).
    pub poisoned: i64,
    /// Until every message was answered or dead-lettered.
    pub seconds: f64,
    pub per_second: f64,
    /// Groups that held poison: sbworker diverts each from its first poison message on
    /// (the conversation is one ordered stream); a peer skips its poison messages and
    /// goes on with the rest of the group.
    pub groups_diverted: i64,
    pub dead_letters: i64,
    /// From a poison message reaching the head of its group to its diversion (or to a
    /// peer's last failed attempt).
    pub p50_ms_to_dead_letter: f64,
    pub max_ms_to_dead_letter: f64,
    /// Every group without poison complete, in order, each message once; every poisoned
    /// group as the contender's semantics say (above), each message once.
    pub others_unaffected: bool,
    /// sbworker: the queue still enabled at the end (a peer has no queue to disable).
    pub queue_enabled: Option<bool>,
}

/// The poison run: the headline's shape, 1% of the messages poison.
pub async fn poison(
    world: &World,
    subject: Subject<'_>,
    shape: Shape,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<PoisonRun> {
    let total = shape.messages() as i64;
    let poisoned = (total / 100).max(1);
    let c = subject.load(world, shape, true).await?;
    let (mark, progress, verify) = match subject {
        Subject::Sbworker(..) => (stmt::POISON_MARK.sql, Progress::RepliedOrDiverted, stmt::POISON_VERIFY.sql),
        Subject::Peer(p) => {
            c.batch_execute(p.pick(stmt::GRAPHILE_DEAD, stmt::RIVER_DEAD, stmt::PGMQ_DEAD)).await?;
            (
                p.pick(stmt::GRAPHILE_POISON_MARK, stmt::RIVER_POISON_MARK, stmt::PGMQ_POISON_MARK),
                Progress::PeerRepliedOrDead,
                stmt::PEER_POISON_VERIFY.sql,
            )
        }
    };
    let marked = c.execute(mark, &[&poisoned]).await?;
    anyhow::ensure!(marked as i64 == poisoned, "marked {marked} poison messages of {poisoned}");
    let tag = format!("poison-{}-{repetition}", subject.contender().key());
    let start_unix = unix_now();
    let started = Instant::now();
    let worker = subject.start(shape, dir, &tag).await?;
    runs::drained(&c, &tag, total, started, progress).await?;
    let seconds = started.elapsed().as_secs_f64();
    worker.terminate().await?;
    let v = c.query_one(verify, &[&i64::from(shape.per_group), &start_unix]).await?;
    let (clean_incomplete, ooo, groups_diverted, diverted_wrong, dead_letters): (i64, i64, i64, i64, i64) =
        (v.get(0), v.get(1), v.get(2), v.get(3), v.get(4));
    let (replies, applied, distinct, queue_enabled): (i64, i64, i64, Option<bool>) =
        (v.get(5), v.get(6), v.get(7), v.get(8));
    let others_unaffected = clean_incomplete == 0
        && ooo == 0
        && diverted_wrong == 0
        && replies == applied
        && distinct == replies
        && applied + dead_letters == total;
    let m = PoisonRun {
        contender: subject.contender(),
        repetition,
        messages: total as u64,
        poisoned,
        seconds,
        per_second: total as f64 / seconds,
        groups_diverted,
        dead_letters,
        p50_ms_to_dead_letter: v.get(9),
        max_ms_to_dead_letter: v.get(10),
        others_unaffected,
        queue_enabled,
    };
    super::progress(&format!(
        "{tag}: {total} messages ({poisoned} poison) in {seconds:.2} s; {dead_letters} dead-lettered, \
         p50 {:.0} ms to divert",
        m.p50_ms_to_dead_letter
    ));
    Ok(m)
}

/// What the bloat run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BloatRun {
    pub contender: Contender,
    pub repetition: usize,
    pub seconds: f64,
    pub messages_handled: i64,
    /// Messages per second over the first and the last tenth of the run.
    pub start_per_second: f64,
    pub end_per_second: f64,
    /// `end_per_second / start_per_second`.
    pub ratio: f64,
    /// Messages handled in each second of the run.
    pub per_second_series: Vec<f64>,
    /// The pin held for the whole run (the server listed its backend xmin at the end).
    pub xmin_pinned: bool,
    /// Dead tuples of the broker's and the bench's tables at the end, and the largest.
    pub dead_tuples: i64,
    pub top_dead: Vec<(String, i64, i64)>,
    /// The backlog ran out before the time was up (the run is shorter than planned).
    pub drained_early: bool,
}

/// The bloat run: `shape`'s backlog worked for `how_long` with xmin pinned.
pub async fn bloat(
    world: &World,
    subject: Subject<'_>,
    shape: Shape,
    how_long: Duration,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<BloatRun> {
    let url = subject.url();
    drop(subject.load(world, shape, true).await?);
    // The pin: a snapshot held open on a connection of its own until the end.
    let pin = world::connect(url).await?;
    pin.batch_execute(stmt::PIN_XMIN.sql).await?;
    let pin_pid: i32 = pin.query_one(stmt::BACKEND_PID.sql, &[]).await?.get(0);
    let tag = format!("bloat-{}-{repetition}", subject.contender().key());
    let c = world::connect(url).await?;
    let total = shape.messages() as i64;
    let started = Instant::now();
    let worker = subject.start(shape, dir, &tag).await?;
    // One sample a second, on the second (the interval is the measurement's clock).
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut counts = vec![0i64];
    let mut drained_early = false;
    while started.elapsed() < how_long {
        tick.tick().await;
        let done: i64 = c.query_one(stmt::REPLIES.sql, &[]).await?.get(0);
        counts.push(done);
        if counts.len() % 10 == 0 {
            super::progress(&format!("{tag}: {done} messages, {:.0} s, xmin pinned", started.elapsed().as_secs_f64()));
        }
        if done >= total {
            drained_early = true;
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    worker.terminate().await?;
    runs::settle().await;
    let xmin_pinned = c.query_one(stmt::PINNED.sql, &[&pin_pid]).await?.get::<_, i64>(0) == 1;
    let dead: Vec<(String, i64, i64)> =
        c.query(stmt::DEAD_TUPLES.sql, &[]).await?.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    pin.batch_execute("ROLLBACK").await?;
    let series: Vec<f64> = counts.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    if series.is_empty() {
        bail!("{tag}: the run ended before its first sample");
    }
    // The first second holds the worker's start: the start window begins after it
    // (where the run is long enough to leave it out).
    let skip = usize::from(series.len() > 2);
    let tenth = ((series.len() - skip) / 10).max(1);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let start_per_second = mean(&series[skip..skip + tenth]);
    let end_per_second = mean(&series[series.len() - tenth..]);
    let m = BloatRun {
        contender: subject.contender(),
        repetition,
        seconds,
        messages_handled: *counts.last().unwrap_or(&0),
        start_per_second,
        end_per_second,
        ratio: end_per_second / start_per_second.max(1e-9),
        per_second_series: series,
        xmin_pinned,
        dead_tuples: dead.iter().map(|d| d.1).sum(),
        top_dead: dead.into_iter().take(4).collect(),
        drained_early,
    };
    super::progress(&format!(
        "{tag}: {:.0}/s at the start, {:.0}/s at the end ({:.0}%), {} dead tuples",
        m.start_per_second,
        m.end_per_second,
        m.ratio * 100.0,
        m.dead_tuples
    ));
    Ok(m)
}
