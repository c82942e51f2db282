//! The worker's Prometheus metrics (counters per queue, the processing-time histogram,
//! readers and depth gauges) and the readiness each queue reports.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

type Counters = Family<QueueLabel, Counter>;

/// What a queue is doing, for `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueStatus {
    Starting,
    Serving,
    /// The queue is disabled in the broker; its readers are stopped.
    Disabled,
    /// The broker cannot be reached.
    Unreachable,
    Stopping,
}

pub struct Metrics {
    registry: Registry,
    pub received: Counters,
    pub answered: Counters,
    pub faulted: Counters,
    pub ended: Counters,
    pub superseded: Counters,
    pub retried: Counters,
    pub dead_lettered: Counters,
    pub committed: Counters,
    pub given_back: Counters,
    pub processing: Family<QueueLabel, Histogram, fn() -> Histogram>,
    pub readers: Family<QueueLabel, Gauge>,
    pub busy: Family<QueueLabel, Gauge>,
    pub depth: Family<QueueLabel, Gauge>,
    pub enabled: Family<QueueLabel, Gauge>,
    pub transient_failures: Counters,
    pub transient_waiting: Family<QueueLabel, Gauge>,
    pub transient_oldest_wait: Family<QueueLabel, Gauge<f64, AtomicU64>>,
    status: Mutex<BTreeMap<String, QueueStatus>>,
    /// Per queue, why it is not ready because of transient failures (none when fine).
    transient_alerts: Mutex<BTreeMap<String, String>>,
}

/// One queue's metrics, looked up once: each a handle on its family's child for the
/// queue (they share its value), so a reader does not look them up per group. The
/// queue's `enabled` and `depth` gauges are not among them: a series exists only once
/// the queue has been observed (a 0 before would read as "disabled").
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    pub label: QueueLabel,
    pub received: Counter,
    pub answered: Counter,
    pub faulted: Counter,
    pub ended: Counter,
    pub superseded: Counter,
    pub retried: Counter,
    pub dead_lettered: Counter,
    pub committed: Counter,
    pub given_back: Counter,
    pub transient_failures: Counter,
    pub processing: Histogram,
    pub readers: Gauge,
    pub busy: Gauge,
}

fn processing_histogram() -> Histogram {
    // 0.25 ms to about 8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sbworker");
        let m = Self {
            received: Counters::default(),
            answered: Counters::default(),
            faulted: Counters::default(),
            ended: Counters::default(),
            superseded: Counters::default(),
            retried: Counters::default(),
            dead_lettered: Counters::default(),
            committed: Counters::default(),
            given_back: Counters::default(),
            processing: Family::new_with_constructor(processing_histogram as fn() -> Histogram),
            readers: Family::default(),
            busy: Family::default(),
            depth: Family::default(),
            enabled: Family::default(),
            transient_failures: Counters::default(),
            transient_waiting: Family::default(),
            transient_oldest_wait: Family::default(),
            registry: Registry::default(),
            status: Mutex::new(BTreeMap::new()),
            transient_alerts: Mutex::new(BTreeMap::new()),
        };
        registry.register("messages_received", "Messages received", m.received.clone());
        registry.register("requests_answered", "Requests answered", m.answered.clone());
        registry.register("requests_faulted", "Requests answered with a Fout or an error end", m.faulted.clone());
        registry.register(
            "requests_superseded",
            "Requests answered without computing, a newer roster version being answered",
            m.superseded.clone(),
        );
        registry.register(
            "conversations_ended",
            "Conversations this side ended without an error: on EndDialog or Error, or with its answer",
            m.ended.clone(),
        );
        registry.register("groups_retried", "Group transactions rolled back and tried again", m.retried.clone());
        registry.register(
            "messages_dead_lettered",
            "Messages diverted to the dead-letter table",
            m.dead_lettered.clone(),
        );
        registry.register(
            "transactions_committed",
            "Reader transactions committed, each with one conversation group or more (groups_per_transaction)",
            m.committed.clone(),
        );
        registry.register(
            "groups_given_back",
            "Groups rolled back with another group of their transaction, their attempt given back",
            m.given_back.clone(),
        );
        registry.register(
            "group_processing_seconds",
            "Time from RECEIVE to COMMIT of one conversation group",
            m.processing.clone(),
        );
        registry.register("readers", "Readers running", m.readers.clone());
        registry.register("readers_busy", "Readers holding a group", m.busy.clone());
        registry.register("queue_depth", "Messages waiting on the queue", m.depth.clone());
        registry.register("queue_enabled", "1 when the queue is enabled in the broker", m.enabled.clone());
        registry.register(
            "transient_failures",
            "Group transactions that failed by the environment's fault (deadlock, lock timeout, lost connection); \
             retried without counting against the message",
            m.transient_failures.clone(),
        );
        registry.register(
            "groups_waiting_transient",
            "Groups waiting to be retried after transient failures",
            m.transient_waiting.clone(),
        );
        registry.register(
            "transient_oldest_wait_seconds",
            "How long the longest-waiting group has been retried on transient failures",
            m.transient_oldest_wait.clone(),
        );
        Self { registry, ..m }
    }

    /// The metrics of `queue`.
    pub fn queue(&self, queue: &str) -> QueueMetrics {
        let l = Self::label(queue);
        QueueMetrics {
            received: self.received.get_or_create(&l).clone(),
            answered: self.answered.get_or_create(&l).clone(),
            faulted: self.faulted.get_or_create(&l).clone(),
            ended: self.ended.get_or_create(&l).clone(),
            superseded: self.superseded.get_or_create(&l).clone(),
            retried: self.retried.get_or_create(&l).clone(),
            dead_lettered: self.dead_lettered.get_or_create(&l).clone(),
            committed: self.committed.get_or_create(&l).clone(),
            given_back: self.given_back.get_or_create(&l).clone(),
            transient_failures: self.transient_failures.get_or_create(&l).clone(),
            processing: self.processing.get_or_create(&l).clone(),
            readers: self.readers.get_or_create(&l).clone(),
            busy: self.busy.get_or_create(&l).clone(),
            label: l,
        }
    }

    pub fn label(queue: &str) -> QueueLabel {
        QueueLabel { queue: queue.to_owned() }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Groups of `queue` waiting on transient failures, the longest wait, and whether
    /// that wait is past the alert threshold (then `/readyz` says so and answers 503).
    pub fn set_transient(&self, queue: &str, waiting: usize, oldest: std::time::Duration, alert: bool) {
        let label = Self::label(queue);
        self.transient_waiting.get_or_create(&label).set(waiting as i64);
        self.transient_oldest_wait.get_or_create(&label).set(oldest.as_secs_f64());
        let mut alerts = self.transient_alerts.lock().unwrap_or_else(|e| e.into_inner());
        if alert {
            alerts.insert(
                queue.to_owned(),
                format!(
                    "{queue}: {waiting} groups retried on transient failures, the oldest for {} s",
                    oldest.as_secs()
                ),
            );
        } else {
            alerts.remove(queue);
        }
    }

    pub fn set_status(&self, queue: &str, status: QueueStatus) {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).insert(queue.to_owned(), status);
    }

    /// Ready when every queue is serving; otherwise the queues that are not, and why.
    pub fn readiness(&self) -> Result<(), String> {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let mut not: Vec<String> =
            status.iter().filter(|(_, s)| **s != QueueStatus::Serving).map(|(q, s)| format!("{q}: {s:?}")).collect();
        not.extend(self.transient_alerts.lock().unwrap_or_else(|e| e.into_inner()).values().cloned());
        if status.is_empty() {
            Err("starting".into())
        } else if not.is_empty() {
            Ok(())
        } else {
            Err(not.join("\n"))
        }
    }
}
