//! The PostgreSQL cluster of this test process (one, started on first use, stopped by
//! an exit hook) and a fresh database with the broker installed for each test.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use sbworker::pg_cluster::Cluster;

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
static AT_EXIT: Mutex<Vec<(u32, std::path::PathBuf)>> = Mutex::new(Vec::new());

extern "C" fn stop_at_exit() {
    if let Ok(mut g) = AT_EXIT.lock() {
        for (pid, dir) in g.drain(..) {
            // SAFETY: stopping our own server (SIGQUIT: immediate shutdown) and reaping it.
            unsafe {
                libc::kill(pid as i32, libc::SIGQUIT);
                let mut status = 0;
                libc::waitpid(pid as i32, &mut status, 0);
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Stops `c` when this test process exits (a cluster in a static is never dropped).
pub fn stop_when_done(c: &Cluster) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    let (pid, dir) = c.pid_and_dir();
    AT_EXIT.lock().unwrap().push((pid, dir.to_owned()));
    // SAFETY: registering a plain extern "C" function to run at exit, once.
    HOOK.call_once(|| unsafe {
        libc::atexit(stop_at_exit);
    });
}

pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let c = Cluster::start(&["synchronous_commit=off"]).expect("a PostgreSQL cluster for the tests");
        stop_when_done(&c);
        c
    })
}

/// A fresh database with the broker installed; returns its connection string. Its
/// sessions give up on a lock after 60 s and on a statement after 120 s, so a locking
/// bug fails a test instead of hanging the run.
pub async fn fresh_db() -> String {
    let name = format!("t{}", NEXT_DB.fetch_add(1, Ordering::SeqCst));
    let url = cluster().create_database(&name).await.expect("create database");
    sbworker::broker::postgres::install(&url).await.expect("broker installs");
    format!("{url} options='-c lock_timeout=60s -c statement_timeout=120s'")
}

/// A fresh database with the broker, the roster schema and housekeeping, and a plain
/// client on it.
pub async fn fresh_roster_db() -> (String, tokio_postgres::Client) {
    let url = fresh_db().await;
    sbworker::broker::postgres::install_with(&url, true).await.expect("roster installs");
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    (url, client)
}

/// A planner's edit: the end of the employee's first block moves `minutes` later (a
/// roster change, so the key's version rises and its Vraag is sent).
pub async fn lengthen_first_block(c: &tokio_postgres::Client, dienstverband: i32, minutes: i32) {
    c.execute(
        "UPDATE rooster.tijdblok SET eind_tijd = eind_tijd + make_interval(mins => $2)
          WHERE id = (SELECT t.id FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id
                       WHERE d.dienstverband_id = $1 ORDER BY t.id LIMIT 1)",
        &[&dienstverband, &minutes],
    )
    .await
    .unwrap();
}
