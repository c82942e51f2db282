//! The worker's Prometheus metrics (counters per queue, the processing-time histogram,
//! readers and depth gauges) and the readiness each queue reports.

use std::collections::BTreeMap;
use std::sync::Mutex;

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
    pub processing: Family<QueueLabel, Histogram, fn() -> Histogram>,
    pub readers: Family<QueueLabel, Gauge>,
    pub busy: Family<QueueLabel, Gauge>,
    pub depth: Family<QueueLabel, Gauge>,
    pub enabled: Family<QueueLabel, Gauge>,
    status: Mutex<BTreeMap<String, QueueStatus>>,
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
            processing: Family::new_with_constructor(processing_histogram as fn() -> Histogram),
            readers: Family::default(),
            busy: Family::default(),
            depth: Family::default(),
            enabled: Family::default(),
            registry: Registry::default(),
            status: Mutex::new(BTreeMap::new()),
        };
        registry.register("messages_received", "Messages received", m.received.clone());
        registry.register("requests_answered", "Requests answered", m.answered.clone());
        registry.register("requests_faulted", "Requests answered with a Fout or an error end", m.faulted.clone());
        registry.register(
            "requests_superseded",
            "Requests answered without computing, a newer roster version being answered",
            m.superseded.clone(),
        );
        registry.register("conversations_ended", "Conversations ended on EndDialog or Error", m.ended.clone());
        registry.register("groups_retried", "Group transactions rolled back and tried again", m.retried.clone());
        registry.register(
            "messages_dead_lettered",
            "Messages diverted to the dead-letter table",
            m.dead_lettered.clone(),
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
        Self { registry, ..m }
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

    pub fn set_status(&self, queue: &str, status: QueueStatus) {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).insert(queue.to_owned(), status);
    }

    /// Ready when every queue is serving; otherwise the queues that are not, and why.
    pub fn readiness(&self) -> Result<(), String> {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let not: Vec<String> =
            status.iter().filter(|(_, s)| **s != QueueStatus::Serving).map(|(q, s)| format!("{q}: {s:?}")).collect();
        if status.is_empty() {
            Err("starting".into())
        } else if not.is_empty() {
            Ok(())
        } else {
            Err(not.join("\n"))
        }
    }
}
