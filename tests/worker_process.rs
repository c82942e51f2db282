//! The worker as a real process (`sbworker run`): answers requests, drains on SIGTERM
//! and exits 0, loses nothing when killed with SIGKILL in the middle of a group, and
//! refuses a bad configuration naming the key.

use sbworker::contract::message_types;
use tokio::process::Command;
use uuid::Uuid;

use crate::common::calc::*;
use crate::common::process::Worker;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

fn config_with(url: &str, extra: &str) -> String {
    config_text(url, &format!("[log]\nlevel = \"info\"\n\n{extra}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_logging_json_writes_one_object_per_line_with_group_spans_and_stops_on_sigint() {
    // (Draining on SIGTERM and SIGKILL's effects are in the conformance suite, on every
    // back end.)
    let (url, mut s) = calc_world().await;
    let dir = TempDir::new("json-log");
    let mut handles = Vec::new();
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

async fn sbworker(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out =
        crate::common::within(600, "the command ends", Command::new(BIN).args(args).envs(env.iter().copied()).output())
            .await
            .unwrap();
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
    // (Its Error comes first: a dialog's Error is received before its other messages.)
    let doomed_types: Vec<&str> =
        got.iter().filter(|m| m.conversation_handle == doomed).map(|m| m.message_type.as_str()).collect();
    assert_eq!(
        doomed_types,
        [sbworker::broker::system::ERROR, message_types::FOUT],
        "the message that killed three workers is answered with a Fout"
    );
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
