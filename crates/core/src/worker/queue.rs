//! One queue's supervisor: starts `min_readers` readers, adds one per scale interval
//! while the queue has a backlog and every reader is busy (up to `max_readers`),
//! replaces readers that died, and stops every reader of a queue the broker disabled
//! (error 9617), checking it again periodically while other queues go on.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::metrics::QueueStatus;
use super::reader::{self, ReaderExit};
use super::{QueueCtx, Stop};
use crate::transport::{QueueState, Session, Transport};

/// The longest an idle supervisor (no reader, `min_readers = 0`) waits for work before it
/// looks at the queue anyway (its state, the database's reader limit).
const IDLE_WAIT: Duration = Duration::from_secs(30);

pub(crate) async fn supervise<T: Transport>(ctx: Arc<QueueCtx<T>>, mut stop: Stop) {
    let span = info_span!("queue", queue = %ctx.name, handler = %ctx.cfg.handler);
    async move {
        let m = &ctx.metrics;
        m.set_status(&ctx.name, QueueStatus::Starting);
        let mut readers = JoinSet::new();
        let mut next_id = 0u32;
        let reader_stop = stop.clone();
        let mut spawn = |readers: &mut JoinSet<ReaderExit>| {
            next_id += 1;
            ctx.readers.fetch_add(1, Ordering::SeqCst);
            readers.spawn(reader::read(ctx.clone(), next_id, reader_stop.clone()));
            ctx.meters.readers.set(ctx.readers.load(Ordering::SeqCst) as i64);
        };
        let mut monitor: Option<T::Session> = None;
        // The database's reader limit before the first readers start.
        if let Some(state) = observe(&ctx, &mut monitor).await {
            set_db_cap(&ctx, &state);
        }
        for _ in 0..ctx.min_readers() {
            spawn(&mut readers);
        }
        // After a reader found every slot the database allows held, none is added for a
        // while (another process holds them; each try costs a session): five scale
        // intervals, doubling while it goes on (at most a minute), forgotten when the
        // limit changes.
        let mut slots_full_until: Option<Instant> = None;
        let first_pause = 5 * ctx.settings.scale_interval;
        let mut slots_pause = first_pause;
        let mut disabled = false;
        let mut recheck_at = Instant::now();
        let recheck = ctx.settings.disabled_recheck;
        let mut tick = tokio::time::interval(ctx.settings.scale_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.stopped() => break,
                Some(done) = readers.join_next() => {
                    match done {
                        Ok(ReaderExit::Idle) => debug!("an idle reader left"),
                        Ok(exit) => {
                            ctx.readers.fetch_sub(1, Ordering::SeqCst);
                            match exit {
                                ReaderExit::Disabled if !disabled => {
                                    disabled = true;
                                    recheck_at = Instant::now() + recheck;
                                    error!("QUEUE DISABLED by the broker (error 9617): its readers stop; \
                                            re-enable it (ALTER QUEUE … WITH STATUS = ON) after finding the cause");
                                    m.set_status(&ctx.name, QueueStatus::Disabled);
                                    ctx.metrics.enabled.get_or_create(&ctx.meters.label).set(0);
                                }
                                ReaderExit::NoSlot => {
                                    slots_full_until = Some(Instant::now() + slots_pause);
                                    slots_pause = (slots_pause * 2).min(first_pause.max(Duration::from_secs(60)));
                                }
                                _ => {}
                            }
                        }
                        Err(e) => {
                            ctx.readers.fetch_sub(1, Ordering::SeqCst);
                            error!("a reader panicked: {e}");
                        }
                    }
                    ctx.meters.readers.set(ctx.readers.load(Ordering::SeqCst) as i64);
                }
                _ = tick.tick() => {
                    // No reader, and none wanted: wait for work without looking at every
                    // tick (the PostgreSQL broker's wake-ups; SQL Server looks at once).
                    if ctx.min_readers() == 0
                        && ctx.readers.load(Ordering::SeqCst) == 0
                        && !disabled
                        && let Some(s) = monitor.as_mut()
                    {
                        tokio::select! {
                            _ = stop.stopped() => break,
                            waited = s.wait_for_work(&ctx.name, IDLE_WAIT) => {
                                if let Err(e) = waited {
                                    warn!("cannot wait for the queue's work: {e}");
                                    monitor = None;
                                }
                            }
                        }
                    }
                    // A group retried on transient failures fails again within the
                    // longest backoff and a wait for its lock; longer is no longer waiting.
                    let stale = 2 * ctx.settings.retry.max_delay + ctx.cfg.wait
                        + Duration::from_secs(5);
                    let (waiting, oldest) = ctx.waits.snapshot(stale);
                    let alert = oldest >= ctx.settings.transient_alert;
                    if alert {
                        warn!(waiting, oldest_s = oldest.as_secs(), "groups retried on transient failures for long");
                    }
                    m.set_transient(&ctx.name, waiting, oldest, alert);
                    let state = observe(&ctx, &mut monitor).await;
                    if disabled {
                        if Instant::now() < recheck_at {
                            continue;
                        }
                        recheck_at = Instant::now() + recheck;
                        match state {
                            Some(s) if s.enabled => {
                                info!("queue enabled again: readers start");
                                disabled = false;
                                ctx.metrics.enabled.get_or_create(&ctx.meters.label).set(1);
                            }
                            _ => {
                                error!(recheck_ms = ctx.settings.disabled_recheck.as_millis() as u64, "queue is still disabled");
                                continue;
                            }
                        }
                    }
                    let Some(state) = state else { continue };
                    if set_db_cap(&ctx, &state) {
                        slots_full_until = None;
                        slots_pause = first_pause;
                    }
                    if !state.enabled {
                        // Readers find out at their next receive; stop adding them now.
                        if !disabled {
                            disabled = true;
                            recheck_at = Instant::now() + recheck;
                            error!("QUEUE DISABLED in the broker: its readers stop; re-enable it after finding the cause");
                            m.set_status(&ctx.name, QueueStatus::Disabled);
                            ctx.metrics.enabled.get_or_create(&ctx.meters.label).set(0);
                        }
                        continue;
                    }
                    let running = ctx.readers.load(Ordering::SeqCst);
                    if slots_full_until.is_some_and(|t| Instant::now() < t) {
                        // Every slot the database allows was held a moment ago.
                    } else if running < ctx.min_readers() {
                        spawn(&mut readers);
                    } else if running < ctx.max_readers()
                        && state.messages > 0
                        && ctx.busy.load(Ordering::SeqCst) >= running
                    {
                        info!(readers = running + 1, backlog = state.messages, "backlog with every reader busy: adding a reader");
                        spawn(&mut readers);
                    }
                    m.set_status(&ctx.name, QueueStatus::Serving);
                }
            }
        }
        m.set_status(&ctx.name, QueueStatus::Stopping);
        while let Some(done) = readers.join_next().await {
            if let Err(e) = done {
                error!("a reader panicked while stopping: {e}");
            }
        }
        ctx.readers.store(0, Ordering::SeqCst);
        ctx.meters.readers.set(0);
    }
    .instrument(span)
    .await
}

/// Records the database's limit on the queue's readers (0: none), saying when it changes
/// (true): readers above it leave at their next look, fewer are added.
fn set_db_cap<T: Transport>(ctx: &QueueCtx<T>, state: &QueueState) -> bool {
    let cap = state.max_readers.unwrap_or(0);
    let before = ctx.db_cap.swap(cap, Ordering::SeqCst);
    let changed = before != cap;
    if changed {
        if cap == 0 {
            info!("the database sets no limit on this queue's readers (MAX_QUEUE_READERS 0)");
        } else {
            info!(limit = cap, "the database allows this many readers on this queue, across every worker");
        }
    }
    changed
}

/// The queue's state through the supervisor's own session (reopened when lost); None
/// when the broker cannot be reached.
async fn observe<T: Transport>(ctx: &QueueCtx<T>, monitor: &mut Option<T::Session>) -> Option<QueueState> {
    if monitor.is_none() {
        match ctx.transport.open().await {
            Ok(s) => *monitor = Some(s),
            Err(e) => {
                warn!("cannot reach the broker: {e}");
                ctx.metrics.set_status(&ctx.name, QueueStatus::Unreachable);
                return None;
            }
        }
    }
    let s = monitor.as_mut()?;
    match s.queue_state(&ctx.name).await {
        Ok(state) => {
            ctx.metrics.depth.get_or_create(&ctx.meters.label).set(state.messages);
            ctx.metrics.enabled.get_or_create(&ctx.meters.label).set(i64::from(state.enabled));
            Some(state)
        }
        Err(e) => {
            warn!("cannot read the queue's state: {e}");
            *monitor = None;
            ctx.metrics.set_status(&ctx.name, QueueStatus::Unreachable);
            None
        }
    }
}
