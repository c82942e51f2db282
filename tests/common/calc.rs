//! The calculation dialog in a fresh database (message types, contract, the answer and
//! calculation queues and services), requests to send, answers to collect, and a
//! worker to run in this process or as a real `sbworker run` process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sbworker::broker::Message;
use sbworker::broker::postgres::{PostgresTransport, Session};
use sbworker::config::{self, Config};
use sbworker::contract::{Limits, encode_vraag, message_types};
use sbworker::engine::Tables;
use sbworker::handlers::calculation;
use sbworker::transport::Transport;
use sbworker::worker::{self, Handlers, Metrics, RunOutcome};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::build::{dienst, maart, w};
use super::pg::fresh_db;

pub use sbworker::handlers::{DATA_QUEUE, REKEN_QUEUE};
pub const DATA_SERVICE: &str = "/Rekenserver/LoonfactorBerekening/DataService";
pub const REKEN_SERVICE: &str = "/Rekenserver/LoonfactorBerekening/RekenService";
pub const CONTRACT: &str = "/Rekenserver/LoonfactorBerekening/DataContract";

/// A fresh database with the broker installed (the calculation dialog comes with it:
/// `003_calculation.sql`); its URL and a session.
pub async fn calc_world() -> (String, Session) {
    let url = fresh_db().await;
    let s = Session::open(&url).await.unwrap();
    (url, s)
}

/// A valid Vraag (one day shift in March 2026) with this Id, for a dienstverband of its
/// own (so no two are versions of one key).
pub fn vraag_body(id: Uuid) -> Vec<u8> {
    static NEXT_DV: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);
    let mut v = maart(vec![dienst("2026-03-10", vec![w("07:00", "15:30")])]);
    v.id = id;
    v.dienstverband.id = NEXT_DV.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    encode_vraag(&v).into_bytes()
}

/// Begins a dialog, sends `body` as a Vraag and commits; the initiator's handle.
pub async fn ask(s: &mut Session, body: &[u8]) -> Uuid {
    s.begin().await.unwrap();
    let h = s.begin_dialog(DATA_SERVICE, REKEN_SERVICE, CONTRACT, None, None).await.unwrap();
    s.send(h, message_types::VRAAG, Some(body)).await.unwrap();
    s.commit().await.unwrap();
    h
}

/// Receives from the answer queue until `n` messages other than EndDialog have come
/// (each receive waits for the next commit), committing as it goes; the EndDialogs the
/// calculation sends after its answers are left out. Panics after 60 s without
/// progress.
pub async fn collect(s: &mut Session, n: usize) -> Vec<Message> {
    let mut got = Vec::new();
    while got.len() < n {
        s.begin().await.unwrap();
        let batch = s.receive(DATA_QUEUE, 1000, None, Duration::from_secs(60)).await.unwrap();
        s.commit().await.unwrap();
        assert!(!batch.is_empty(), "no answer within 60 s; have {} of {n}", got.len());
        got.extend(batch.into_iter().filter(|m| m.message_type != sbworker::broker::system::END_DIALOG));
    }
    got
}

/// Ends the initiator's side of each conversation (as the collector does).
pub async fn end_all(s: &mut Session, handles: impl IntoIterator<Item = Uuid>) {
    s.begin().await.unwrap();
    for h in handles {
        s.end_conversation(h, None).await.unwrap();
    }
    s.commit().await.unwrap();
}

/// `curl -i ARGS http://127.0.0.1:PORT/PATH` (a client we did not write): the status
/// line, the headers and the body.
pub async fn curl(port: u16, path: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-i", "--max-time", "20"])
        .args(args)
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .await
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks `cond` every 20 ms until it holds; panics with `what` after 60 s. For states
/// that no message announces (an endpoint removed, a gauge lowered).
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn count(s: &Session, sql: &str) -> i64 {
    s.client().query_one(sql, &[]).await.unwrap().get(0)
}

/// A worker configuration for the calculation queue (plus `extra` TOML).
pub fn config_text(url: &str, extra: &str) -> String {
    let url = toml::Value::String(url.to_owned());
    format!(
        "[broker]\nkind = \"postgres\"\nconnection = {url}\n\n\
         [worker]\nretry_min_delay_ms = 10\nretry_max_delay_ms = 200\n\n\
         {extra}\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"loonfactor-berekening\"\nwait_ms = 2000\n"
    )
}

pub fn config(url: &str, extra: &str) -> Config {
    config::from_str(&config_text(url, extra), &Vec::new()).unwrap()
}

pub fn calculation_handler() -> Arc<calculation::Calculation> {
    Arc::new(calculation::Calculation::new(Arc::new(Tables::built_in().unwrap()), Limits::default()))
}

/// A worker running in this process.
pub struct InProcess {
    pub stop: mpsc::Sender<()>,
    pub done: JoinHandle<RunOutcome>,
    pub metrics: Arc<Metrics>,
}

impl InProcess {
    pub fn start(url: &str, config: Config, handlers: Handlers<Session>) -> Self {
        Self::start_on(PostgresTransport::new(url), config, handlers)
    }

    /// A worker on any transport.
    pub fn start_on<T: Transport>(transport: T, config: Config, handlers: Handlers<T::Session>) -> Self {
        let metrics = Arc::new(Metrics::new());
        let (stop, rx) = mpsc::channel(4);
        let m = metrics.clone();
        let done =
            tokio::spawn(async move { worker::run(transport, &(&config).into(), &handlers, m, rx).await.unwrap() });
        Self { stop, done, metrics }
    }

    /// Stops it and waits for the outcome.
    pub async fn shutdown(self) -> RunOutcome {
        self.stop.send(()).await.unwrap();
        super::within(60, "the worker drains", self.done).await.unwrap()
    }

    /// Stops it (asserting a clean drain) and returns its final metrics text: every
    /// counter has moved by then.
    pub async fn finish(self) -> String {
        let metrics = self.metrics.clone();
        assert_eq!(self.shutdown().await, RunOutcome::Drained);
        metrics.encode()
    }

    /// The value of a metric line (`name{queue="q"}`), 0 when absent.
    pub fn metric(&self, name_and_labels: &str) -> f64 {
        metric_in(&self.metrics.encode(), name_and_labels)
    }
}

pub fn metric_in(text: &str, name_and_labels: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(name_and_labels).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// The calculation handler under its configured name.
pub fn calc_handlers() -> Handlers<Session> {
    Handlers::default().with(calculation::NAME, calculation_handler())
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("sbworker-{tag}-{}-{}", std::process::id(), Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A quiet `sbworker run` with `config` (written into `dir`), killed when dropped.
pub fn spawn_worker(dir: &TempDir, config: &str) -> tokio::process::Child {
    let path = dir.0.join(format!("sbworker-{}.toml", Uuid::new_v4()));
    std::fs::write(&path, config).unwrap();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["run", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("sbworker starts")
}

/// Sends SIGTERM and returns the exit code.
pub async fn stop_worker(mut child: tokio::process::Child) -> Option<i32> {
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id().expect("running") as i32, libc::SIGTERM) };
    super::within(60, "the worker exits", child.wait()).await.unwrap().code()
}
