//! The worker as a real process (`sbworker run`): answers requests, drains on SIGTERM
//! and exits 0, loses nothing when killed with SIGKILL in the middle of a group, and
//! refuses a bad configuration naming the key.

use std::process::Stdio;

use sbworker::contract::message_types;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::calc::*;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

/// A running `sbworker run` and its stderr, line by line.
struct Worker {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Worker {
    fn start(dir: &TempDir, config: &str) -> Self {
        let path = dir.0.join(format!("sbworker-{}.toml", Uuid::new_v4()));
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sbworker starts");
        let (tx, lines) = mpsc::unbounded_channel();
        let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, seen: Vec::new() }
    }

    /// Waits for a log line containing `text` (the process announces the states tests
    /// wait for).
    async fn wait_for(&mut self, text: &str) {
        loop {
            match self.lines.recv().await {
                Some(line) => {
                    let hit = line.contains(text);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                None => panic!("the worker ended before logging {text:?}:\n{}", self.seen.join("\n")),
            }
        }
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// Waits for the exit; its code (None when killed by a signal).
    async fn exit(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().await.unwrap();
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        (status.code(), self.seen.join("\n"))
    }
}

fn config_with(url: &str, extra: &str) -> String {
    config_text(url, &format!("[log]\nlevel = \"info\"\n\n{extra}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_group_in_flight_commit_and_exits_zero() {
    let (url, mut s) = calc_world().await;
    let dir = TempDir::new("sigterm");
    let mut w = Worker::start(&dir, &config_with(&url, "[hooks]\npause_before_commit = 1"));
    let mut handles = vec![ask(&mut s, &vraag_body(Uuid::new_v4())).await];
    w.wait_for("test hook: paused before commit").await;
    // Stop while the group is inside its transaction, answer sent but not committed.
    w.signal(libc::SIGTERM);
    let (code, log) = w.exit().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("every group in flight was committed"), "{log}");
    let got = collect(&mut s, 1).await;
    assert_eq!(got[0].message_type, message_types::ANTWOORD);
    assert_eq!(got[0].conversation_handle, handles[0]);
    // A new worker process, logging JSON, answers what comes next.
    let mut w = Worker::start(&dir, &config_text(&url, "[log]\nformat = \"json\"\nlevel = \"sbworker=debug\""));
    for _ in 0..5 {
        handles.push(ask(&mut s, &vraag_body(Uuid::new_v4())).await);
    }
    let got = collect(&mut s, 5).await;
    assert!(got.iter().all(|m| m.message_type == message_types::ANTWOORD && handles.contains(&m.conversation_handle)));
    w.wait_for("worker started").await;
    w.signal(libc::SIGINT);
    let (code, log) = w.exit().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(log.lines().all(|l| l.starts_with('{') && l.ends_with('}')), "one JSON object per line:\n{log}");
    // Group spans carry the queue, group and attempt.
    assert!(
        log.lines().any(|l| l.contains("\"message\":\"group committed\"")
            && l.contains("\"queue\":\"loonfactorberekening_reken\"")
            && l.contains("\"attempt\":1")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_in_the_middle_of_a_group_loses_nothing() {
    let (url, mut s) = calc_world().await;
    let dir = TempDir::new("sigkill");
    let mut handles = Vec::new();
    for _ in 0..6 {
        handles.push(ask(&mut s, &vraag_body(Uuid::new_v4())).await);
    }
    // One reader: the paused group is the only one in flight when the worker is killed
    // (with more, another reader may be inside a group of its own at that moment).
    let one_reader = config_with(&url, "[hooks]\npause_before_commit = 1")
        .replace("wait_ms = 2000\n", "wait_ms = 2000\nmax_readers = 1\n");
    assert!(one_reader.contains("max_readers = 1"), "{one_reader}");
    let mut w = Worker::start(&dir, &one_reader);
    w.wait_for("test hook: paused before commit").await;
    w.signal(libc::SIGKILL);
    let (code, _) = w.exit().await;
    assert_eq!(code, None, "killed by the signal");
    // The killed transaction's attempt was counted before its handler ran.
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.message_attempt WHERE attempts = 1").await, 1);
    let mut w = Worker::start(&dir, &config_with(&url, ""));
    let got = collect(&mut s, handles.len()).await;
    let mut answered: Vec<Uuid> = got.iter().map(|m| m.conversation_handle).collect();
    answered.sort();
    handles.sort();
    assert_eq!(answered, handles, "every request answered");
    assert!(got.iter().all(|m| m.message_type == message_types::ANTWOORD));
    w.wait_for("worker started").await;
    w.signal(libc::SIGTERM);
    let (code, log) = w.exit().await;
    assert_eq!(code, Some(0), "{log}");
    // Exactly once: nothing more on either queue, no attempts left, nothing diverted.
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 0);
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.dead_letter").await, 0);
}

async fn sbworker(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).args(args).envs(env.iter().copied()).output().await.unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[tokio::test]
async fn a_bad_config_stops_start_up_naming_the_key() {
    let dir = TempDir::new("badconfig");
    let write = |name: &str, text: &str| {
        let p = dir.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let good = config_text("postgresql://pay:s3cret@127.0.0.1:9/roster", "");
    let cases = [
        (
            good.replace("wait_ms = 2000", "wait_ms = 2000\nmax_readerz = 4"),
            "queues.loonfactorberekening_reken",
            "max_readerz",
        ),
        (
            good.replace("wait_ms = 2000", "max_readers = \"many\""),
            "queues.loonfactorberekening_reken.max_readers",
            "invalid type",
        ),
        (
            good.replace("wait_ms = 2000", "min_readers = 5\nmax_readers = 2"),
            "queues.loonfactorberekening_reken.min_readers",
            "above",
        ),
        (
            good.replace("loonfactor-berekening", "loonfactor"),
            "queues.loonfactorberekening_reken.handler",
            "known: loonfactor-berekening",
        ),
        (good.replace("kind = \"postgres\"", "kind = \"oracle\""), "broker.kind", "oracle"),
        (good.replace("[worker]", "[worker]\nmax_attempts = 5"), "worker.max_attempts", "1 to 3"),
    ];
    for (i, (text, key, detail)) in cases.iter().enumerate() {
        let path = write(&format!("bad{i}.toml"), text);
        for cmd in ["check-config", "run"] {
            let (code, _, err) = sbworker(&[cmd, "--config", &path], &[]).await;
            assert_eq!(code, Some(78), "{cmd} case {i}: {err}");
            assert!(err.contains(key) && err.contains(detail), "{cmd} case {i} should name {key} ({detail}): {err}");
        }
    }
    // Environment overrides are checked the same way, and named by their key.
    let path = write("good.toml", &good);
    let (code, _, err) =
        sbworker(&["check-config", "--config", &path], &[("SBWORKER__WORKER__MAX_ATTEMPTS", "9")]).await;
    assert_eq!(code, Some(78));
    assert!(err.contains("worker.max_attempts"), "{err}");
    let (code, _, err) = sbworker(&["run", "--config", "/nonexistent/sbworker.toml"], &[]).await;
    assert_eq!(code, Some(78));
    assert!(err.contains("/nonexistent/sbworker.toml"), "{err}");
    // A valid one is printed as in effect (environment and flags applied), secret masked.
    let (code, out, err) = sbworker(
        &["check-config", "--config", &path, "--log-format", "json"],
        &[("SBWORKER__QUEUES__LOONFACTORBEREKENING_REKEN__MAX_READERS", "8")],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("pay:***@127.0.0.1"), "{out}");
    assert!(!out.contains("s3cret"), "{out}");
    assert!(out.contains("max_readers = 8"), "{out}");
    assert!(out.contains("format = \"json\""), "{out}");
    // An unreachable broker stops `run` at start-up, with the password masked.
    let (code, _, err) = sbworker(&["run", "--config", &path], &[]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot reach the broker") && !err.contains("s3cret"), "{err}");
}

/// The same worker process on the SQL Server transport, through an emulator in this
/// test process.
async fn mssql_config(url: &str, extra: &str) -> (String, tokio::sync::watch::Sender<bool>) {
    let (stop_tx, stop) = sbworker::worker::Stop::new();
    let creds = sbworker::emulator::server::Credentials { user: "sbworker".into(), password: "pw".into() };
    let (addr, _) =
        sbworker::emulator::server::start("127.0.0.1:0".parse().unwrap(), url.to_owned(), creds, stop).await.unwrap();
    let conn = format!("Server=tcp:127.0.0.1,{};User Id=sbworker;Password=pw;Encrypt=false", addr.port());
    let text = format!(
        "[broker]\nkind = \"mssql\"\nconnection = {}\n\n[worker]\nretry_min_delay_ms = 10\nretry_max_delay_ms = 200\n\n\
         [log]\nlevel = \"info\"\n\n{extra}\n\n[queues.{REKEN_Q}]\nhandler = \"loonfactor-berekening\"\nwait_ms = 1000\n",
        toml::Value::String(conn)
    );
    (text, stop_tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_sigterm_drains_and_sigkill_loses_nothing() {
    let (url, mut s) = calc_world().await;
    let dir = TempDir::new("tds-signals");
    let (paused, _stop) = mssql_config(&url, "[hooks]\npause_before_commit = 1").await;
    let (plain, _stop2) = mssql_config(&url, "").await;
    // SIGTERM while a group waits before its commit: it commits, exit 0.
    let mut w = Worker::start(&dir, &paused);
    let first = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    w.wait_for("test hook: paused before commit").await;
    w.signal(libc::SIGTERM);
    let (code, log) = w.exit().await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(collect(&mut s, 1).await[0].conversation_handle, first);
    // SIGKILL in the same place: after a restart every request has one answer.
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(ask(&mut s, &vraag_body(Uuid::new_v4())).await);
    }
    let mut w = Worker::start(&dir, &paused);
    w.wait_for("test hook: paused before commit").await;
    w.signal(libc::SIGKILL);
    assert_eq!(w.exit().await.0, None);
    let mut w = Worker::start(&dir, &plain);
    let got = collect(&mut s, handles.len()).await;
    let mut answered: Vec<Uuid> = got.iter().map(|m| m.conversation_handle).collect();
    answered.sort();
    handles.sort();
    assert_eq!(answered, handles);
    w.wait_for("worker started").await;
    w.signal(libc::SIGTERM);
    assert_eq!(w.exit().await.0, Some(0));
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 0);
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_three_times_inside_the_same_handler_diverts_that_message_and_nothing_else() {
    let (url, mut s) = calc_world().await;
    let dir = TempDir::new("sigkill-thrice");
    let doomed = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    // Three workers in a row die inside the same message's transaction (after its
    // handler, before its commit): the count of each attempt survives the crash.
    for _ in 0..3 {
        let mut w = Worker::start(&dir, &config_with(&url, "[hooks]\npause_before_commit = 1"));
        w.wait_for("test hook: paused before commit").await;
        w.signal(libc::SIGKILL);
        assert_eq!(w.exit().await.0, None, "killed by the signal");
    }
    let others = [ask(&mut s, &vraag_body(Uuid::new_v4())).await, ask(&mut s, &vraag_body(Uuid::new_v4())).await];
    let mut w = Worker::start(&dir, &config_with(&url, ""));
    // The doomed request's Fout and its conversation's error end, and two Antwoords.
    let got = collect(&mut s, 4).await;
    let reply = |h: Uuid| got.iter().find(|m| m.conversation_handle == h).expect("a reply").message_type.clone();
    assert_eq!(reply(doomed), message_types::FOUT, "the message that killed three workers is answered with a Fout");
    for h in others {
        assert_eq!(reply(h), message_types::ANTWOORD, "the others are answered");
    }
    let (attempts, reason): (i32, String) = {
        let r = s.client().query_one("SELECT attempts, reason FROM sbworker.dead_letter", &[]).await.unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(attempts, 3);
    assert!(reason.contains("each time the worker stopped while handling it"), "{reason}");
    w.wait_for("worker started").await;
    w.signal(libc::SIGTERM);
    assert_eq!(w.exit().await.0, Some(0));
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.dead_letter").await, 1, "nothing else diverted");
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
}
