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

/// A fresh database with the calculation side of a split install only.
pub async fn fresh_calc_side_db() -> String {
    let name = format!("t{}", NEXT_DB.fetch_add(1, Ordering::SeqCst));
    let url = cluster().create_database(&name).await.expect("create database");
    sbworker::broker::postgres::install_side(&url, false, Some(sbworker::transport::Side::Calc))
        .await
        .expect("the calculation side installs");
    url
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

/// A roster of two employees with conversation reuse on, a burst of edits, no worker:
/// every request open on its key's dialog. Its url and a client.
pub async fn reused_and_unanswered() -> (String, tokio_postgres::Client) {
    let (url, c) = fresh_roster_db().await;
    c.execute("INSERT INTO rekenserver.instelling VALUES ('dialog_reuse_idle_seconds', 3600)", &[]).await.unwrap();
    let (mut loader, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    let roster = sbworker::demo::roster::Roster::generate(2, 15, false);
    roster.load(&mut loader).await.unwrap();
    for e in sbworker::demo::edits::burst(&roster, 12, 4) {
        e.apply(&c).await.unwrap();
    }
    (url, c)
}

/// The open request of the key that dialog `h` carried: its dialog, the version it sent
/// and the key's current version.
pub async fn open_request_of_the_key_of(c: &tokio_postgres::Client, h: uuid::Uuid) -> (uuid::Uuid, i64, i64) {
    let row = c
        .query_one(
            "SELECT l.dialog_handle, l.versie, s.versie FROM rekenserver.berekening_log l
               JOIN rekenserver.sleutel s USING (dienstverband_id, periode_id)
              WHERE l.uitkomst IS NULL
                AND (l.dienstverband_id, l.periode_id) =
                    (SELECT dienstverband_id, periode_id FROM rekenserver.berekening_log WHERE dialog_handle = $1 LIMIT 1)",
            &[&h],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// The dialog carrying the most requests, and how many.
pub async fn busiest_dialog(c: &tokio_postgres::Client) -> (uuid::Uuid, i64) {
    let row = c
        .query_one(
            "SELECT dialog_handle, count(*) FROM rekenserver.berekening_log GROUP BY dialog_handle
              ORDER BY count(*) DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// The one number `sql` selects (a count), on a plain client.
pub async fn count_rows(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// `n` stored results in `periode` (dienstverband 1..=n), three factors each, version 1,
/// written as rows (no evidence).
pub async fn stored_results(c: &tokio_postgres::Client, n: i32, periode: i32) {
    c.execute(
        "INSERT INTO rekenserver.resultaat (dienstverband_id, periode_id, versie, vraag_id, dialog_handle)
         SELECT g, $2, 1, gen_random_uuid(), gen_random_uuid() FROM generate_series(1, $1) g",
        &[&n, &periode],
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO rekenserver.resultaat_factor (dienstverband_id, periode_id, kaart_soort, loonfactor_code, waarde)
         SELECT g, $2, 5, code, g * 1.25 FROM generate_series(1, $1) g, unnest(ARRAY['100', '120', '230']) code",
        &[&n, &periode],
    )
    .await
    .unwrap();
}

/// Stores version `versie` of `key` through the collector's function (with its
/// evidence), with the factors 100 and 230 at `hours` and `amount`; its outcome.
pub async fn store_version(
    c: &tokio_postgres::Client,
    key: (i32, i32),
    versie: i64,
    hours: &str,
    amount: &str,
) -> String {
    c.query_one(
        "SELECT rekenserver.sla_antwoord_op(gen_random_uuid(), gen_random_uuid(), $1, $2, $3, false,
                ARRAY[5, 5], ARRAY['100', '230'], ARRAY[$4::text::numeric, $5::text::numeric])",
        &[&key.0, &key.1, &versie, &hours, &amount],
    )
    .await
    .unwrap()
    .get(0)
}
