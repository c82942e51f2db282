//! `sbworker status`: the broker's status document (one JSON document, the same shape
//! from both back ends; documented in docs/operations.md), what in it needs attention,
//! and a table for a terminal.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// The status document. Fields the broker cannot know are null (SQL Server keeps no
/// creation time of a conversation endpoint, so `oldest_open` has no age there).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub backend: String,
    pub at: String,
    pub queues: Vec<QueueStatus>,
    pub workers: Vec<WorkerStatus>,
    pub conversations: Conversations,
    /// Messages waiting to leave for another instance, per far service (SQL Server's
    /// `sys.transmission_queue`); `None` where there is none to read (PostgreSQL, an
    /// install before it).
    #[serde(default)]
    pub transmission: Option<Vec<Transmission>>,
    /// Keys whose roster is newer than their stored result (null without the roster).
    pub stale_keys: Option<StaleKeys>,
    /// The last sweep runs, newest first (null without the roster).
    pub sweeps: Option<Vec<SweepRun>>,
    pub last_export: Option<ExportBatch>,
    /// PostgreSQL's routes to and from other databases (a split install); null where
    /// there are none (one database, SQL Server, an install before them).
    #[serde(default)]
    pub routes: Option<Routes>,
}

/// A split install's routes, as this database sees them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Routes {
    /// The routes out: messages leave by them.
    pub out: Vec<RouteOut>,
    /// The subscriptions in: messages arrive by them.
    #[serde(rename = "in")]
    pub incoming: Vec<RouteIn>,
    pub undeliverable: Undeliverable,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteOut {
    pub route: String,
    pub service: String,
    pub address: Option<String>,
    /// A replication slot of the route's name exists: the far side subscribed.
    pub subscribed: bool,
    /// The far side reads it now.
    pub reading: bool,
    /// WAL the far side has still to take (its messages among it).
    pub behind_bytes: Option<i64>,
    /// Whether the route's slot keeps its WAL (`reserved`, `extended`, `unreserved`) or
    /// lost some (`lost`: the route cannot resume).
    #[serde(default)]
    pub wal_status: Option<String>,
    /// While the far side does not read: the messages the route holds that it has not
    /// confirmed, read from its slot (`sb.route_backlog`); `None` while it reads, or
    /// when they cannot be read.
    #[serde(default)]
    pub waiting: Option<i64>,
    /// How long the oldest of them has waited.
    #[serde(default)]
    pub oldest_waiting_seconds: Option<f64>,
    /// Every waiting message was counted (false: 16 MB of WAL were read, there may be
    /// more).
    #[serde(default)]
    pub waiting_counted_all: Option<bool>,
}

impl RouteOut {
    /// "N messages wait, the oldest for T" (or what is known of them).
    fn waiting_text(&self) -> String {
        match self.waiting {
            Some(n) => format!(
                "{}{n} messages wait{}",
                if self.waiting_counted_all == Some(false) { "at least " } else { "" },
                if n > 0 {
                    format!(", the oldest for {}", seconds(self.oldest_waiting_seconds))
                } else {
                    String::new()
                }
            ),
            None => "messages wait".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteIn {
    pub subscription: String,
    pub enabled: bool,
    /// Its apply worker runs.
    pub applying: bool,
    pub last_message_seconds: Option<f64>,
    pub apply_errors: i64,
}

/// Messages that arrived over a route and could not be delivered (sb.transmission_error).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Undeliverable {
    pub count: i64,
    /// Of them, those of the recent window.
    pub recent: i64,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueStatus {
    pub queue: String,
    pub enabled: bool,
    pub poison_handling: bool,
    pub max_readers: Option<i64>,
    pub messages: i64,
    pub groups_waiting: Option<i64>,
    pub oldest_message_seconds: Option<f64>,
    pub retried_recently: i64,
    pub dead_letters: i64,
    pub dead_letters_not_replayed: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub instance: String,
    pub host: String,
    pub pid: i64,
    pub version: String,
    pub started_at: String,
    pub beat_seconds_ago: f64,
    /// How often it beats (worker.heartbeat_ms).
    #[serde(default)]
    pub interval_ms: Option<i64>,
    /// Per queue: {"readers": n, "busy": n}.
    pub queues: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Conversations {
    /// Endpoints per state (SO, SI, CO, DI, DO, ER, CD).
    pub by_state: std::collections::BTreeMap<String, i64>,
    /// The oldest conversation in flight (a reused dialog waiting idle excepted).
    pub oldest_open: Option<OldestOpen>,
    /// Conversation reuse: the keys' dialogs with no request open, waiting for their
    /// idle timers (the collector ends them). `None` from an install without it.
    #[serde(default)]
    pub reused_idle: Option<i64>,
    /// How long the oldest request without an outcome has waited (`None`: none, or an
    /// install without it).
    #[serde(default)]
    pub oldest_request_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OldestOpen {
    pub handle: String,
    pub service: String,
    pub state: String,
    pub age_seconds: Option<f64>,
}

/// Messages in the transmission queue for one far service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Transmission {
    pub far_service: Option<String>,
    pub messages: i64,
    pub oldest_seconds: Option<f64>,
    /// Why the oldest waits (the broker's transmission_status; empty: not tried yet).
    pub status: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StaleKeys {
    pub count: i64,
    pub oldest_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepRun {
    pub started_at: String,
    pub ended_at: Option<String>,
    pub ms: Option<i64>,
    pub candidates: Option<i64>,
    pub sent: Option<i64>,
    pub deleted: Option<i64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportBatch {
    pub batch: String,
    pub claimed_at: Option<String>,
    pub results: i64,
    pub confirmed: i64,
}

/// When a status needs attention.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// A worker whose last beat is older than this is not alive; `None`: older than
    /// three of its own heartbeat intervals (at least 3 s).
    pub worker_silent_seconds: Option<f64>,
    /// A key stale for longer than this (minutes) needs attention (the document
    /// counts only these).
    pub stale_minutes: i32,
}

/// How long worker `w` may be silent and still count as alive.
pub fn silence_allowed(w: &WorkerStatus, t: Thresholds) -> f64 {
    t.worker_silent_seconds.unwrap_or_else(|| (w.interval_ms.unwrap_or(10_000) as f64 * 3.0 / 1000.0).max(3.0))
}

pub fn alive(w: &WorkerStatus, t: Thresholds) -> bool {
    w.beat_seconds_ago <= silence_allowed(w, t)
}

/// A worker's readers of `queue`: the worker names its queues as its configuration
/// does, with or without the schema (`dbo.q` and `q` are the same queue).
pub fn worker_queue<'a>(w: &'a WorkerStatus, queue: &str) -> Option<&'a serde_json::Value> {
    let bare = |n: &str| n.rsplit('.').next().unwrap_or(n).to_lowercase();
    w.queues.get(queue).or_else(|| w.queues.iter().find(|(k, _)| bare(k) == bare(queue)).map(|(_, v)| v))
}

/// How long (seconds) a message may wait in the transmission queue before it needs
/// attention: Service Broker retries a failed delivery about once a minute.
const TRANSMISSION_STUCK: f64 = 120.0;

/// What needs attention, one line each; empty when all is well.
pub fn attention(s: &Status, t: Thresholds) -> Vec<String> {
    let mut out = Vec::new();
    for q in s.queues.iter().filter(|q| !q.enabled) {
        out.push(format!("queue {} is disabled (RECEIVE is refused; messages wait)", q.queue));
    }
    if !s.workers.iter().any(|w| alive(w, t)) {
        let how = match t.worker_silent_seconds {
            Some(secs) => format!("in the last {secs:.0} s"),
            None => "within three of its heartbeat intervals".to_string(),
        };
        out.push(format!("no worker alive (no heartbeat {how}; a worker with worker.heartbeat_ms = 0 does not beat)"));
    }
    // Messages that should have left for another instance a while ago.
    for t in s.transmission.iter().flatten().filter(|t| t.oldest_seconds.is_some_and(|a| a > TRANSMISSION_STUCK)) {
        out.push(format!(
            "{} messages for {} wait in sys.transmission_queue, the oldest for {}: {}",
            t.messages,
            t.far_service.as_deref().unwrap_or("(no service)"),
            seconds(t.oldest_seconds),
            match t.status.as_deref().map(str::trim) {
                None | Some("") => "not tried yet",
                Some(why) => why,
            }
        ));
    }
    if let Some(r) = &s.routes {
        for o in &r.out {
            if !o.subscribed {
                out.push(format!(
                    "route {} to {}: no far database subscribes to it (run `sbworker link`); its messages wait here",
                    o.route, o.service
                ));
            } else if o.wal_status.as_deref() == Some("lost") {
                out.push(format!(
                    "route {} to {}: its slot lost WAL its far side had not taken (max_slot_wal_keep_size), so it cannot \
                     resume: drop the far side's subscription and this slot and link again (sbworker link; \
                     docs/deployment.md, \"A stuck route\"); its dialogs are repaired by their LIFETIME and the sweep",
                    o.route, o.service
                ));
            } else if !o.reading {
                out.push(format!(
                    "route {} to {} at {}: its far side does not read it (its server down, or its subscription \
                     stopped); {}, {} bytes of WAL behind",
                    o.route,
                    o.service,
                    o.address.as_deref().unwrap_or("?"),
                    o.waiting_text(),
                    o.behind_bytes.unwrap_or(0)
                ));
            }
        }
        for i in r.incoming.iter().filter(|i| !i.applying) {
            out.push(format!(
                "subscription {} {}: messages of its route do not arrive (its last error is in this server's log; \
                 {} apply errors)",
                i.subscription,
                if i.enabled { "is not applying" } else { "is disabled" },
                i.apply_errors
            ));
        }
        if r.undeliverable.recent > 0 {
            out.push(format!(
                "{} messages that arrived over routes recently could not be delivered (sb.transmission_error), \
                 the last: {}",
                r.undeliverable.recent,
                r.undeliverable.last_error.as_deref().unwrap_or("-")
            ));
        }
    }
    if let Some(k) = &s.stale_keys
        && k.count > 0
    {
        out.push(format!(
            "{} keys are stale: their roster changed more than {} minutes ago and their stored result is older",
            k.count, t.stale_minutes
        ));
    }
    // A request in flight for longer than keys may stay stale: its answer is late, or its
    // dialog is lost where this side cannot see it (another database; the LIFETIME ends
    // it). (SQL Server gives no age: sys.conversation_endpoints has no creation time.)
    if let Some(age) = s.conversations.oldest_request_seconds.filter(|a| *a > f64::from(t.stale_minutes) * 60.0) {
        out.push(format!(
            "the oldest request in flight has waited {} for its answer: a worker behind, or a dialog lost where \
             the sweep cannot see it; its LIFETIME ends it",
            seconds(Some(age))
        ));
    }
    out
}

pub(crate) fn seconds(s: Option<f64>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s < 120.0 => format!("{s:.0} s"),
        Some(s) if s < 7200.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} h", s / 3600.0),
    }
}

/// The readers busy on `queue` now, over the workers alive.
pub fn busy(s: &Status, queue: &str, t: Thresholds) -> i64 {
    s.workers
        .iter()
        .filter(|w| alive(w, t))
        .filter_map(|w| worker_queue(w, queue).and_then(|v| v.get("busy")).and_then(|b| b.as_i64()))
        .sum()
}

/// The status as text for a terminal; `colour` marks what needs attention in red.
pub fn render(s: &Status, t: Thresholds, colour: bool) -> String {
    let red = |x: &str| if colour { format!("\x1b[31m{x}\x1b[0m") } else { x.to_string() };
    let green = |x: &str| if colour { format!("\x1b[32m{x}\x1b[0m") } else { x.to_string() };
    let mut o = String::new();
    let _ = writeln!(o, "sbworker status ({}, {})\n", s.backend, s.at);
    let _ = writeln!(
        o,
        "{:<32} {:<9} {:>8} {:>8} {:>9} {:>7} {:>8} {:>9}",
        "QUEUE", "STATE", "MESSAGES", "GROUPS", "OLDEST", "BUSY", "RETRIED", "DEAD(NEW)"
    );
    for q in &s.queues {
        let busy = busy(s, &q.queue, t);
        let state = if q.enabled { green("enabled") } else { red("DISABLED") };
        let pad = if colour { 9 + 9 } else { 9 };
        let _ = writeln!(
            o,
            "{:<32} {:<pad$} {:>8} {:>8} {:>9} {:>7} {:>8} {:>9}",
            q.queue,
            state,
            q.messages,
            q.groups_waiting.map_or("-".into(), |g| g.to_string()),
            seconds(q.oldest_message_seconds),
            busy,
            q.retried_recently,
            format!("{}({})", q.dead_letters, q.dead_letters_not_replayed),
        );
    }
    let _ = writeln!(o, "\nworkers:");
    if s.workers.is_empty() {
        let _ = writeln!(o, "  {}", red("none"));
    }
    for w in &s.workers {
        let alive = alive(w, t);
        let readers: Vec<String> = w
            .queues
            .iter()
            .map(|(q, v)| {
                let n = |k: &str| v.get(k).and_then(|x| x.as_i64()).unwrap_or(0);
                format!("{q} {} readers ({} busy)", n("readers"), n("busy"))
            })
            .collect();
        let beat = format!("beat {} ago", seconds(Some(w.beat_seconds_ago)));
        let _ = writeln!(
            o,
            "  {} pid {} v{} since {}, {}: {}",
            w.host,
            w.pid,
            w.version,
            w.started_at,
            if alive { beat } else { red(&format!("SILENT, {beat}")) },
            readers.join(", ")
        );
    }
    if let Some(ts) = s.transmission.as_ref().filter(|ts| !ts.is_empty()) {
        let _ = writeln!(o, "\ntransmission queue (messages leaving for another instance):");
        for t in ts {
            let line = format!(
                "  {}: {} messages, the oldest {}{}",
                t.far_service.as_deref().unwrap_or("(no service)"),
                t.messages,
                seconds(t.oldest_seconds),
                t.status
                    .as_deref()
                    .map(str::trim)
                    .filter(|w| !w.is_empty())
                    .map_or(String::new(), |w| format!(": {w}"))
            );
            let stuck = t.oldest_seconds.is_some_and(|a| a > TRANSMISSION_STUCK);
            let _ = writeln!(o, "{}", if stuck { red(&line) } else { line });
        }
    }
    if let Some(r) = &s.routes {
        let _ = writeln!(o, "\nroutes:");
        for x in &r.out {
            let line = format!(
                "  out {} to {} at {}: {}",
                x.route,
                x.service,
                x.address.as_deref().unwrap_or("?"),
                match (x.subscribed, x.reading) {
                    (false, _) => "NOT SUBSCRIBED".to_owned(),
                    (true, _) if x.wal_status.as_deref() == Some("lost") => {
                        "its slot LOST WAL: it cannot resume, link it again".to_owned()
                    }
                    (true, false) => {
                        format!("NOT READ, {}, {} bytes behind", x.waiting_text(), x.behind_bytes.unwrap_or(0))
                    }
                    (true, true) => format!("read, {} bytes behind", x.behind_bytes.unwrap_or(0)),
                }
            );
            let healthy = x.subscribed && x.reading && x.wal_status.as_deref() != Some("lost");
            let _ = writeln!(o, "{}", if healthy { line } else { red(&line) });
        }
        for i in &r.incoming {
            let line = format!(
                "  in {}: {}, last message {} ago, {} apply errors",
                i.subscription,
                if i.applying { "applying" } else { "NOT APPLYING" },
                seconds(i.last_message_seconds),
                i.apply_errors
            );
            let _ = writeln!(o, "{}", if i.applying { line } else { red(&line) });
        }
        if r.undeliverable.count > 0 {
            let _ = writeln!(
                o,
                "  undeliverable: {} ({} recent), the last: {}",
                r.undeliverable.count,
                r.undeliverable.recent,
                r.undeliverable.last_error.as_deref().unwrap_or("-")
            );
        }
    }
    let states: Vec<String> = s.conversations.by_state.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(o, "\nconversations: {}", if states.is_empty() { "none".into() } else { states.join(", ") });
    if let Some(n) = s.conversations.reused_idle.filter(|n| *n > 0) {
        let _ = writeln!(o, "  reused dialogs idle, ended by their timers: {n}");
    }
    if let Some(c) = &s.conversations.oldest_open {
        let _ = writeln!(
            o,
            "  oldest open: {} ({}, {}), {}",
            c.handle,
            c.service,
            c.state,
            c.age_seconds.map_or("age unknown".into(), |a| format!("open {}", seconds(Some(a))))
        );
    }
    match &s.stale_keys {
        Some(k) if k.count > 0 => {
            let _ = writeln!(
                o,
                "\n{}",
                red(&format!("stale keys: {} (the oldest changed {} ago)", k.count, seconds(k.oldest_seconds)))
            );
        }
        Some(_) => {
            let _ = writeln!(o, "\nstale keys: none");
        }
        None => {}
    }
    if let Some(runs) = &s.sweeps {
        match runs.first() {
            Some(r) => {
                let outcome = match &r.error {
                    Some(e) => red(&format!("error: {e}")),
                    None if r.ended_at.is_none() => "running or interrupted".into(),
                    None => format!("{} candidates, {} sent", r.candidates.unwrap_or(0), r.sent.unwrap_or(0)),
                };
                let _ = writeln!(o, "last sweep: {}, {outcome}", r.started_at);
            }
            None => {
                let _ = writeln!(o, "last sweep: never");
            }
        }
    }
    match &s.last_export {
        Some(e) => {
            let _ = writeln!(
                o,
                "last export: batch {} at {}, {} results, {} confirmed",
                e.batch,
                e.claimed_at.as_deref().unwrap_or("-"),
                e.results,
                e.confirmed
            );
        }
        None => {
            let _ = writeln!(o, "last export: never");
        }
    }
    let needs = attention(s, t);
    if needs.is_empty() {
        let _ = writeln!(o, "\n{}", green("all is well"));
    } else {
        let _ = writeln!(o, "\nneeds attention:");
        for n in needs {
            let _ = writeln!(o, "  {}", red(&n));
        }
    }
    o
}
