//! `sbworker run` as an operator starts it, as a real process: its text log has no
//! colour codes when stderr is a pipe (only a terminal gets them), and a start-up error
//! says its cause once (checked with a wrong password against a PostgreSQL server that
//! asks for one).

use std::process::Stdio;

use sbworker::pg_cluster::Cluster;
use tokio::process::Command;

use crate::common::calc::{TempDir, calc_world, config_text};

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

/// Writes `config` into `dir` and runs `sbworker run` with it to the end: exit code and
/// stderr.
async fn run_to_end(dir: &TempDir, config: &str) -> (Option<i32>, String) {
    let path = dir.0.join("sbworker.toml");
    std::fs::write(&path, config).unwrap();
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(BIN).args(["run", "--config"]).arg(&path).stdin(Stdio::null()).output(),
    )
    .await
    .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_into_a_pipe_carry_no_colour_codes() {
    let (url, _s) = calc_world().await;
    let dir = TempDir::new("no-colour");
    // Text is the default format; at info the worker logs its start.
    let mut worker = crate::common::process::Worker::start(&dir, &config_text(&url, "[log]\nlevel = \"info\""));
    // Read up to the line that says the worker runs.
    worker.wait_for("worker started").await;
    // Enough said: stop it (a SIGTERM this early may come before its handler is set).
    worker.signal(libc::SIGKILL);
    let (_, text) = worker.exit().await;
    assert!(text.contains(" INFO "), "the level is written as plain text:\n{text}");
    assert!(!text.contains('\x1b'), "an ESC (ANSI colour code) in a log written to a pipe:\n{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_up_error_says_its_cause_once() {
    // A server of its own: the shared one trusts every connection. This one trusts only
    // the superuser that sets it up and asks everybody else for a password.
    let dir = TempDir::new("password");
    let hba = dir.0.join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    let setting = format!("hba_file={}", hba.display());
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(&[&setting])).await.unwrap().unwrap();
    let (client, conn) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.batch_execute("CREATE ROLE pay LOGIN PASSWORD 'the-right-one'").await.unwrap();

    let conn = format!("host=127.0.0.1 port={} user=pay password=a-wrong-one dbname=postgres", cluster.port());
    let (code, err) = run_to_end(&dir, &config_text(&conn, "")).await;
    assert_eq!(code, Some(1), "{err}");
    // The server's own message, once (it was printed twice: the error's message and its
    // cause in the chain both held it).
    let said = "password authentication failed for user \"pay\"";
    assert_eq!(err.matches(said).count(), 1, "{err}");
    assert!(err.contains("cannot reach the broker") && !err.contains("a-wrong-one"), "{err}");

    // The same when nothing listens at all.
    let (code, err) = run_to_end(&dir, &config_text("host=127.0.0.1 port=9 user=pay dbname=roster", "")).await;
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.matches("error connecting to server").count(), 1, "{err}");
}

/// The configuration's flags are taken where people type them: after a subcommand's own
/// subcommand too (`sbworker dead-letter list --config F`), with the same meaning as
/// before it. Here both forms reach the configuration (and stop at its missing queue,
/// exit 78), rather than one being refused as a bad argument (exit 2).
#[tokio::test]
async fn the_configuration_flags_are_taken_after_the_subcommand_too() {
    let dir = TempDir::new("flags-after");
    let path = dir.0.join("sbworker.toml");
    std::fs::write(&path, "[broker]\nkind = \"postgres\"\nconnection = \"host=127.0.0.1 dbname=x\"\n").unwrap();
    let path = path.to_str().unwrap();
    let mut said = Vec::new();
    for args in [["dead-letter", "--config", path, "list"], ["dead-letter", "list", "--config", path]] {
        let out = Command::new(BIN).args(args).stdin(Stdio::null()).output().await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
        assert!(err.contains("no queue is configured"), "{args:?}: {err}");
        said.push(err);
    }
    assert_eq!(said[0], said[1]);
}
