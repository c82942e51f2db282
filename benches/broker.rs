//! Raw PostgreSQL broker throughput: send (BEGIN DIALOG + SEND, one commit per dialog)
//! and drain (RECEIVE + END CONVERSATION, one commit per group) with 4 sessions each,
//! at a backlog of N and of 10 x N, so that the cost per message can be compared as the
//! queue grows; then N again right after the big drain, while its dead rows are fresh;
//! then twice more while another transaction pins xmin (no dead row can be vacuumed).
//!
//! Run: `cargo bench --bench broker` (N = 10,000; `-- --quick` for N = 2,000). It starts
//! its own throwaway cluster (fsync on, synchronous_commit off: the broker's CPU and
//! locking cost, not the disk's flush speed, which swings widely on these machines) and
//! writes its report to stdout and to bench-report/broker.txt.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use sbworker::broker::postgres::{Session, install};
use sbworker::pg_cluster::Cluster;

const SESSIONS: usize = 4;

async fn setup(url: &str) {
    install(url).await.expect("install");
    let s = Session::open(url).await.expect("session");
    s.client()
        .batch_execute(
            "SELECT sb.create_message_type('/b/Vraag', 'NONE');
             SELECT sb.create_contract('/b/C', ARRAY[['/b/Vraag','INITIATOR']]);
             SELECT sb.create_queue('iq'); SELECT sb.create_queue('tq');
             SELECT sb.create_service('/b/I', 'iq'); SELECT sb.create_service('/b/T', 'tq', ARRAY['/b/C']);",
        )
        .await
        .expect("catalogue");
}

/// Sends `n` dialogs of one message each, one commit per dialog; returns messages/s.
async fn send(url: &str, n: i64) -> f64 {
    let left = Arc::new(AtomicI64::new(n));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..SESSIONS {
        let (url, left) = (url.to_owned(), left.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = Session::open(&url).await.expect("session");
            let body = vec![b'x'; 2000];
            while left.fetch_sub(1, Ordering::SeqCst) > 0 {
                s.begin().await.expect("begin");
                let h = s.begin_dialog("/b/I", "/b/T", "/b/C", None, None).await.expect("dialog");
                s.send(h, "/b/Vraag", Some(&body)).await.expect("send");
                s.commit().await.expect("commit");
            }
        }));
    }
    for t in tasks {
        t.await.expect("sender");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Receives and ends `n` messages' groups, one commit per group; returns messages/s.
/// Every group holds one message, so each receive takes exactly one message from a
/// shared budget: the runs never take messages meant for the next one.
async fn drain(url: &str, n: i64) -> f64 {
    let budget = Arc::new(AtomicI64::new(n));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..SESSIONS {
        let (url, budget) = (url.to_owned(), budget.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = Session::open(&url).await.expect("session");
            while budget.fetch_sub(1, Ordering::SeqCst) > 0 {
                s.begin().await.expect("begin");
                let got = s.receive("tq", 1, None, Duration::from_millis(50)).await.expect("receive");
                match got.first() {
                    Some(m) => s.end_conversation(m.conversation_handle, None).await.expect("end"),
                    None => {
                        budget.fetch_add(1, Ordering::SeqCst);
                    }
                }
                s.commit().await.expect("commit");
            }
        }));
    }
    for t in tasks {
        t.await.expect("receiver");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn dead_rows(url: &str) -> i64 {
    let s = Session::open(url).await.expect("session");
    s.client()
        .query_one("SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'sb' AND relname = 'message'", &[])
        .await
        .expect("stats")
        .get(0)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: i64 = if quick { 2_000 } else { 10_000 };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let cluster = Cluster::start(&["fsync=on", "synchronous_commit=off", "shared_buffers=256MB"]).expect("cluster");
    let mut report = String::new();
    rt.block_on(async {
        let _ = writeln!(
            report,
            "PostgreSQL broker throughput ({SESSIONS} senders, {SESSIONS} receivers; fsync on, synchronous_commit off)"
        );
        let _ = writeln!(report, "{:<44} {:>12}", "run", "messages/s");
        let small = cluster.create_database("small").await.expect("db");
        setup(&small).await;
        let s1 = send(&small, n).await;
        let d1 = drain(&small, n).await;
        let _ = writeln!(report, "{:<44} {:>12.0}", format!("send, backlog {n}"), s1);
        let _ = writeln!(report, "{:<44} {:>12.0}", format!("receive + end, backlog {n}"), d1);
        let big = cluster.create_database("big").await.expect("db");
        setup(&big).await;
        let s10 = send(&big, 10 * n).await;
        let d10_first = drain(&big, n).await;
        let d10_rest = drain(&big, 9 * n).await;
        let _ = writeln!(report, "{:<44} {:>12.0}", format!("send, backlog {}", 10 * n), s10);
        let _ = writeln!(report, "{:<44} {:>12.0}", format!("receive + end, first {n} of {}", 10 * n), d10_first);
        let _ = writeln!(report, "{:<44} {:>12.0}", format!("receive + end, other {} of {}", 9 * n, 10 * n), d10_rest);
        let dead = dead_rows(&big).await;
        let s_again = send(&big, n).await;
        let d_again = drain(&big, n).await;
        let _ =
            writeln!(report, "{:<44} {:>12.0}", format!("send {n} after the big drain ({dead} dead rows)"), s_again);
        let _ = writeln!(report, "{:<44} {:>12.0}", format!("receive + end {n} after the big drain"), d_again);
        // The classic killer: a transaction that pins xmin, so no dead row can be vacuumed.
        let pin = Session::open(&big).await.expect("session");
        pin.client()
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM sb.queue;")
            .await
            .expect("pin");
        for round in 1..=2 {
            let s = send(&big, n).await;
            let d = drain(&big, n).await;
            let dead = dead_rows(&big).await;
            let _ = writeln!(report, "{:<44} {:>12.0}", format!("send {n}, xmin pinned, round {round}"), s);
            let _ = writeln!(
                report,
                "{:<44} {:>12.0}",
                format!("receive + end {n}, xmin pinned, round {round} ({dead} dead)"),
                d
            );
        }
        pin.client().batch_execute("COMMIT").await.expect("unpin");
        let _ = writeln!(report, "cost per message at 10x backlog vs 1x (drain): {:.2}x", d1 / d10_first);
    });
    print!("{report}");
    let _ = std::fs::create_dir_all("bench-report");
    let _ = std::fs::write("bench-report/broker.txt", &report);
}
