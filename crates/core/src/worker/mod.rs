//! The worker runtime: per queue a supervisor that keeps between `min_readers` and
//! `max_readers` readers (like `MAX_QUEUE_READERS`); each reader loops begin → RECEIVE
//! one group → handle → COMMIT, with retries, durable attempt counts and diversion of
//! messages that keep failing; graceful shutdown in two stages; metrics and health over
//! HTTP.
//!
//! Layout: [`settings`] (what it runs with, resolved once from the configuration),
//! [`handler`] (the handler trait and registry; the handlers themselves are in
//! [`crate::handlers`]), `queue` (the supervisor: scaling, disabled queues), `reader` (one
//! reader's loop, retries, diversion), [`retry`] (backoff), [`metrics`], `http`
//! (`/metrics`, `/healthz`, `/readyz`), `heartbeat`, `waits` (the groups waiting to be
//! tried again after a transient failure), `unfinished` (what a stopping worker still
//! owes its attempt counts). It uses the transport's traits only.

pub mod handler;
mod heartbeat;
pub mod http;
pub mod metrics;
mod queue;
mod reader;
pub mod retry;
pub mod settings;
mod unfinished;
mod waits;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::transport::Transport;
pub use crate::transport::system::DIVERTED;
pub use handler::{Handled, Handler, HandlerError, Handlers};
pub use metrics::Metrics;
use retry::RetryPolicy;
pub use settings::Settings;

pub use crate::shutdown::Stop;

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("queues.{queue}.handler: no handler named \"{handler}\" is registered")]
    NoHandler { queue: String, handler: String },
    // The cause is the error's `source()`, not part of its message: `{:#}` (anyhow at
    // the binary's edge) prints the chain, which would otherwise say it twice.
    #[error("http.listen: cannot listen on {addr}")]
    Http { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("cannot reach the broker ({broker})")]
    Broker { broker: String, source: crate::transport::BrokerError },
    #[error("queues.{queue}")]
    Queue { queue: String, source: crate::transport::BrokerError },
    #[error(
        "queues.{queue}: the broker's poison-message handling is on for this queue: five rolled-back receives in a \
         row (deadlocks or dropped connections alone can make them) would disable it. sbworker's attempt accounting \
         is the poison rule: turn the broker's off ({fix}), or set worker.allow_broker_poison_detection = true to \
         serve it anyway"
    )]
    PoisonDetection { queue: String, fix: String },
}

/// How the worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every group in flight finished and committed.
    Drained,
    /// Stopped before groups in flight finished (their transactions rolled back): after
    /// the grace period, or on a second signal.
    Aborted { reason: String },
}

/// What the test hooks still have to do (see [`crate::config::Hooks`]).
#[derive(Debug, Default)]
pub struct HookState {
    pauses_left: AtomicU32,
}

impl HookState {
    /// Takes one pause, if any are left.
    fn take_pause(&self) -> bool {
        self.pauses_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

/// Everything a queue's supervisor and readers share.
pub(crate) struct QueueCtx<T: Transport> {
    pub name: String,
    pub cfg: settings::Queue,
    pub settings: Arc<Settings>,
    pub transport: Arc<T>,
    pub handler: Arc<dyn Handler<T::Session>>,
    pub metrics: Arc<Metrics>,
    /// This queue's metrics, looked up once.
    pub meters: metrics::QueueMetrics,
    pub retry: RetryPolicy,
    pub reconnect: RetryPolicy,
    /// Readers running.
    pub readers: AtomicU32,
    /// The database's limit on this queue's readers across every worker process and
    /// host (its MAX_QUEUE_READERS), as the supervisor last read it; 0: none. Each reader
    /// holds one of its slots while it reads.
    pub db_cap: AtomicU32,
    /// Readers holding a group.
    pub busy: AtomicU32,
    /// Transactions still to take one group each, queue-wide, after a transaction of
    /// several groups failed without saying which (each group then fails or commits on
    /// its own).
    pub solo: AtomicU32,
    /// Groups waiting to be retried after transient failures.
    pub waits: waits::TransientWaits,
    /// Attempts and notes a stopping worker still owes the counts.
    pub unfinished: unfinished::Unfinished,
    pub hooks: Arc<HookState>,
}

impl<T: Transport> QueueCtx<T> {
    pub fn wait(&self) -> Duration {
        self.cfg.wait
    }

    /// Most groups the next transaction takes: one while a failed transaction of several
    /// groups is being sorted out, else the queue's `groups_per_transaction`.
    pub fn groups_for_next(&self) -> usize {
        if self.solo.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            1
        } else {
            self.cfg.groups_per_transaction
        }
    }

    /// The most readers this process runs now: the configuration's `max_readers`, and
    /// not more than the database's limit.
    pub fn max_readers(&self) -> u32 {
        match self.db_cap.load(Ordering::SeqCst) {
            0 => self.cfg.max_readers,
            cap => self.cfg.max_readers.min(cap),
        }
    }

    /// The readers this process keeps running: `min_readers`, within
    /// [`QueueCtx::max_readers`].
    pub fn min_readers(&self) -> u32 {
        self.cfg.min_readers.min(self.max_readers())
    }

    /// A reader that has been idle may leave if more than the minimum are running.
    pub fn try_leave(&self) -> bool {
        let min = self.min_readers();
        let left = self.readers.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n > min).then(|| n - 1)).is_ok();
        if left {
            self.meters.readers.set(self.readers.load(Ordering::SeqCst) as i64);
        }
        left
    }
}

/// Checks that the broker can be reached and every configured queue exists, before
/// any reader starts (a bad connection string or queue name stops start-up).
pub async fn preflight<T: Transport>(transport: &T, settings: &Settings) -> Result<(), WorkerError> {
    use crate::transport::Session;
    let mut s =
        transport.open().await.map_err(|source| WorkerError::Broker { broker: transport.describe(), source })?;
    for queue in settings.queues.iter().map(|q| &q.name) {
        let state = s.queue_state(queue).await.map_err(|source| WorkerError::Queue { queue: queue.clone(), source })?;
        if state.poison_handling {
            let fix = transport.poison_handling_off(queue);
            if !settings.allow_broker_poison_detection {
                return Err(WorkerError::PoisonDetection { queue: queue.clone(), fix });
            }
            warn!(queue, fix, "the broker's poison-message handling is on for this queue (allowed by configuration)");
        }
        if !state.enabled {
            warn!(queue, "queue is disabled in the broker; its readers wait until it is enabled again");
        }
    }
    Ok(())
}

/// Writes what the stopped readers still owed the attempt counts (groups a shutdown
/// aborted, notes not yet written) as transient failures, on a session of its own,
/// within a few seconds; what cannot be written is logged (those attempts keep counting).
async fn settle_unfinished<T: Transport>(transport: &T, queues: &[Arc<QueueCtx<T>>]) {
    use crate::transport::Session;
    let owed: Vec<unfinished::Note> = queues.iter().flat_map(|q| q.unfinished.take()).collect();
    if owed.is_empty() {
        return;
    }
    let write = async {
        let mut s = transport.open().await?;
        for (keys, error, fault) in &owed {
            s.note_failure(keys, error, *fault).await?;
        }
        Ok::<(), crate::transport::BrokerError>(())
    };
    match tokio::time::timeout(Duration::from_secs(5), write).await {
        Ok(Ok(())) => info!(groups = owed.len(), "attempts interrupted by the shutdown were given back"),
        Ok(Err(e)) => warn!(groups = owed.len(), "cannot give back the attempts the shutdown interrupted: {e}"),
        Err(_) => warn!(groups = owed.len(), "cannot give back the attempts the shutdown interrupted: timed out"),
    }
}

/// Runs the worker until the first message on `signals` or its closing (stop receiving,
/// finish the groups in flight, up to the shutdown grace); then a second message or
/// the deadline aborts what is left (rolled back: nothing is lost).
pub async fn run<T: Transport>(
    transport: T,
    settings: &Settings,
    handlers: &Handlers<T::Session>,
    metrics: Arc<Metrics>,
    mut signals: mpsc::Receiver<()>,
) -> Result<RunOutcome, WorkerError> {
    let transport = Arc::new(transport);
    let shared = Arc::new(settings.clone());
    let hooks = Arc::new(HookState { pauses_left: AtomicU32::new(settings.pause_before_commit) });
    let mut queues = Vec::new();
    for q in &settings.queues {
        let handler = handlers
            .get(&q.handler)
            .ok_or_else(|| WorkerError::NoHandler { queue: q.name.clone(), handler: q.handler.clone() })?;
        queues.push(Arc::new(QueueCtx {
            name: q.name.clone(),
            cfg: q.clone(),
            settings: shared.clone(),
            transport: transport.clone(),
            handler,
            metrics: metrics.clone(),
            meters: metrics.queue(&q.name),
            retry: settings.retry,
            reconnect: settings.reconnect,
            readers: AtomicU32::new(0),
            db_cap: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            solo: AtomicU32::new(0),
            waits: waits::TransientWaits::default(),
            unfinished: unfinished::Unfinished::default(),
            hooks: hooks.clone(),
        }));
    }
    let (stop_tx, stop) = Stop::new();
    let (http_stop_tx, http_stop) = Stop::new();
    let http = match settings.http_listen {
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| WorkerError::Http { addr, source })?;
            info!(addr = %listener.local_addr().map_or(addr, |a| a), "serving /metrics, /healthz and /readyz");
            Some(tokio::spawn(http::serve(listener, metrics.clone(), http_stop)))
        }
        None => None,
    };
    info!(broker = %transport.describe(), queues = queues.len(), "worker started");
    let mut supervisors = JoinSet::new();
    for ctx in &queues {
        supervisors.spawn(queue::supervise(ctx.clone(), stop.clone()));
    }
    let (beat_stop_tx, beat_stop) = Stop::new();
    let beat = settings.heartbeat.map(|every| {
        tokio::spawn(heartbeat::beat(
            transport.clone(),
            queues.clone(),
            crate::transport::Heartbeat {
                interval_ms: i32::try_from(every.as_millis()).unwrap_or(i32::MAX),
                ..heartbeat::identity()
            },
            every,
            beat_stop,
        ))
    });

    tokio::select! {
        _ = signals.recv() => {}
        _ = async { while supervisors.join_next().await.is_some() {} } => {
            warn!("every queue supervisor ended on its own");
        }
    }
    let grace = settings.shutdown_grace;
    info!(grace_ms = grace.as_millis() as u64, "stopping: no new receives; finishing groups in flight");
    let _ = stop_tx.send(true);
    let outcome = tokio::select! {
        _ = async { while supervisors.join_next().await.is_some() {} } => RunOutcome::Drained,
        _ = tokio::time::sleep(grace) => RunOutcome::Aborted { reason: format!("groups still in flight after {} ms", grace.as_millis()) },
        Some(()) = signals.recv() => RunOutcome::Aborted { reason: "a second stop signal".into() },
    };
    if let RunOutcome::Aborted { reason } = &outcome {
        let in_flight: u32 = queues.iter().map(|q| q.busy.load(Ordering::SeqCst)).sum();
        error!(reason = %reason, in_flight, "aborting: open transactions roll back, their messages stay queued");
        supervisors.abort_all();
        while supervisors.join_next().await.is_some() {}
    } else {
        info!("stopped: every group in flight was committed");
    }
    settle_unfinished(transport.as_ref(), &queues).await;
    let _ = beat_stop_tx.send(true);
    if let Some(b) = beat {
        let _ = b.await;
    }
    let _ = http_stop_tx.send(true);
    if let Some(h) = http {
        let _ = h.await;
    }
    Ok(outcome)
}
