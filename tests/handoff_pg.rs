//! The payroll hand-off and the housekeeping on PostgreSQL: exports that never share a
//! row, at-most-once and leased at-least-once claims, the guard against marking what
//! has nothing to export; the sweep's lock, fuse, run log and retention.

use std::collections::BTreeSet;
use std::process::Stdio;

use sbworker::demo::roster::Roster;
use sbworker::handoff::export::{self, Mode};
use sbworker::handoff::sweep::{self, Outcome};
use tokio::process::Command;
use tokio_postgres::Client;

use crate::common::calc::{TempDir, spawn_worker, stop_worker};
use crate::common::pg::fresh_roster_db;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");
const P: i32 = 202604;
const LEASE: Mode = Mode::Lease { seconds: 900.0 };

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// `n` stored results in period P (dienstverband 1..=n), three factors each, version 1.
async fn results(c: &Client, n: i32) {
    crate::common::pg::stored_results(c, n, P).await
}

async fn connect(url: &str) -> Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

/// Claims and commits; the dienstverband ids taken.
async fn claim(c: &mut Client, mode: Mode) -> (uuid::Uuid, BTreeSet<i32>) {
    let tx = c.transaction().await.unwrap();
    let b = export::claim(&tx, P, mode).await.unwrap();
    tx.commit().await.unwrap();
    (b.id, b.rows.iter().map(|r| r.dienstverband_id).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_exports_at_the_same_moment_never_get_the_same_row() {
    let (url, c) = fresh_roster_db().await;
    results(&c, 200).await;
    let (mut a, mut b) = (connect(&url).await, connect(&url).await);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let run = |mut c: Client, barrier: std::sync::Arc<tokio::sync::Barrier>| async move {
        let tx = c.transaction().await.unwrap();
        barrier.wait().await;
        let batch = export::claim(&tx, P, Mode::Once).await.unwrap();
        tx.commit().await.unwrap();
        batch.rows.iter().map(|r| r.dienstverband_id).collect::<BTreeSet<i32>>()
    };
    let (x, y) = tokio::join!(
        tokio::spawn(run(std::mem::replace(&mut a, connect(&url).await), barrier.clone())),
        tokio::spawn(run(std::mem::replace(&mut b, connect(&url).await), barrier.clone()))
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x.is_disjoint(&y), "both took {:?}", x.intersection(&y).collect::<Vec<_>>());
    assert_eq!(x.len() + y.len(), 200);
    // Everything is marked: a second export of the period gets nothing.
    assert!(claim(&mut a, Mode::Once).await.1.is_empty());
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE export_status = 2").await, 200);
}

#[tokio::test]
async fn a_lease_comes_back_unless_confirmed() {
    let (url, c) = fresh_roster_db().await;
    results(&c, 10).await;
    let mut e = connect(&url).await;
    let (first, got) = claim(&mut e, LEASE).await;
    assert_eq!(got.len(), 10);
    // Within the lease nothing comes back.
    assert!(claim(&mut e, LEASE).await.1.is_empty());
    // The lease passes unconfirmed (the claim made 20 minutes older, as the original hand-off does).
    c.batch_execute("UPDATE rekenserver.resultaat SET geclaimd_op = geclaimd_op - interval '20 minutes'")
        .await
        .unwrap();
    let (second, again) = claim(&mut e, LEASE).await;
    assert_eq!(again, got, "the unconfirmed claim comes back");
    // The first batch was taken again: confirming it confirms nothing.
    assert_eq!(export::ack(&e, first).await.unwrap(), 0);
    assert_eq!(export::ack(&e, second).await.unwrap(), 10);
    assert_eq!(export::ack(&e, second).await.unwrap(), 0, "a batch is confirmed once");
    // Confirmed results never come back, however old their claim.
    c.batch_execute("UPDATE rekenserver.resultaat SET geclaimd_op = geclaimd_op - interval '1 day'").await.unwrap();
    assert!(claim(&mut e, LEASE).await.1.is_empty());
    assert!(claim(&mut e, Mode::Once).await.1.is_empty());
}

#[tokio::test]
async fn nothing_is_marked_for_an_employee_without_rows_and_a_newer_version_goes_again() {
    let (url, c) = fresh_roster_db().await;
    results(&c, 5).await;
    c.batch_execute(&format!(
        "DELETE FROM rekenserver.resultaat_factor WHERE dienstverband_id = 3 AND periode_id = {P}"
    ))
    .await
    .unwrap();
    let mut e = connect(&url).await;
    let (_, got) = claim(&mut e, Mode::Once).await;
    assert_eq!(got, BTreeSet::from([1, 2, 4, 5]));
    let status: i16 = c
        .query_one("SELECT export_status FROM rekenserver.resultaat WHERE dienstverband_id = 3", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, 0, "a result with nothing to export is not marked");
    // A newer version of an exported result is stored: it is exported again, with a
    // new stable key.
    c.execute(
        "SELECT rekenserver.sla_antwoord_op(gen_random_uuid(), gen_random_uuid(), 2, $1, 2, false, \
         ARRAY[5], ARRAY['100'], ARRAY['9.75']::numeric[])",
        &[&P],
    )
    .await
    .unwrap();
    let tx = e.transaction().await.unwrap();
    let batch = export::claim(&tx, P, Mode::Once).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(batch.rows.len(), 1);
    assert_eq!(batch.rows[0].key(), format!("2-{P}-2"));
    assert_eq!(batch.rows[0].waarde, "9.7500");
}

#[tokio::test]
async fn the_export_command_writes_csv_and_json_and_confirms_leases() {
    let (url, c) = fresh_roster_db().await;
    results(&c, 4).await;
    let dir = TempDir::new("export");
    let csv = dir.0.join("april.csv");
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(BIN)
            .args(["export", "--postgres", &url, "--periode", &P.to_string(), "--mode", "lease", "--out"])
            .arg(&csv)
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("exported 4 results (12 factor rows)"), "{stderr}");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 13);
    assert!(text.lines().nth(1).unwrap().contains(&format!(",1-{P}-1,1,{P},1,5,100,1.2500")), "{text}");
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 1, "no partial file is left");
    let batch = stderr.split("--ack ").nth(1).unwrap().trim().to_owned();
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(BIN).args(["export", "--postgres", &url, "--ack", &batch]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 results confirmed"));
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(BIN).args(["export", "--postgres", &url, "--ack", &batch]).output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "a second confirmation says there is nothing to confirm");
    // JSON, to standard output: factors nested under each employee.
    c.batch_execute("UPDATE rekenserver.resultaat SET export_status = 0").await.unwrap();
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(BIN)
            .args(["export", "--periode", &P.to_string(), "--format", "json"])
            .env("SBWORKER__BROKER__CONNECTION", &url)
            .stderr(Stdio::null())
            .output(),
    )
    .await
    .unwrap();
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_eq!(json.matches("\"sleutel\":").count(), 4);
    assert_eq!(json.matches("\"loonfactor_code\":").count(), 12);
    assert!(json.contains(&format!("\"sleutel\":\"4-{P}-1\",\"dienstverband_id\":4")), "{json}");
}

async fn log_steps(c: &Client) -> Vec<(String, Option<i32>, Option<i32>, Option<String>)> {
    c.query(
        "SELECT stap, kandidaten, verzonden, fout FROM rekenserver.run_log WHERE stap <> 'retentie' ORDER BY id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

#[tokio::test]
async fn an_overlapping_sweep_is_skipped_and_logged() {
    let (url, c) = fresh_roster_db().await;
    c.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    let mut loader = connect(&url).await;
    loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(3, 1, false).load(&mut loader).await.unwrap();
    // Another run holds the lock.
    let holder = connect(&url).await;
    holder.batch_execute("SELECT pg_advisory_lock(hashtext('rekenserver.sweep'))").await.unwrap();
    let mut s = connect(&url).await;
    assert_eq!(sweep::run(&mut s, sweep::Options::default()).await.unwrap(), Outcome::Skipped);
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, 0, "a skipped run sends nothing");
    let steps = log_steps(&c).await;
    assert_eq!(steps.len(), 1);
    assert!(steps[0].3.as_deref().unwrap().starts_with("skipped"), "{steps:?}");
    // Released: the next run does the work.
    holder.batch_execute("SELECT pg_advisory_unlock(hashtext('rekenserver.sweep'))").await.unwrap();
    let o = sweep::run(&mut s, sweep::Options::default()).await.unwrap();
    assert!(matches!(o, Outcome::Ran { sent: 3, .. }), "{o:?}");
}

#[tokio::test]
async fn after_a_bulk_import_with_sending_off_sweeps_send_each_stale_key_once_under_the_fuse() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    // The documented switch for bulk imports: versions rise, nothing is sent.
    loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(25, 2, false).load(&mut loader).await.unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.sleutel").await, 25);
    let opts = sweep::Options { fuse: 10, batch: 4, ..sweep::Options::default() };
    let mut s = connect(&url).await;
    let mut sent = Vec::new();
    for _ in 0..4 {
        match sweep::run(&mut s, opts).await.unwrap() {
            Outcome::Ran { candidates, sent: n, fuse_reached, .. } => {
                assert_eq!(candidates, n);
                sent.push((n, fuse_reached));
            }
            Outcome::Skipped => panic!("nothing else holds the lock"),
        }
    }
    // At most the fuse per run; the keys in flight are not sent again.
    assert_eq!(sent, [(10, true), (10, true), (5, false), (0, false)]);
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, 25);
    assert_eq!(
        count(&c, "SELECT count(DISTINCT (dienstverband_id, periode_id)) FROM rekenserver.berekening_log").await,
        25
    );
    assert_eq!(count(&c, "SELECT count(*) FROM sb.message").await, 25);
    // The run log: one row per run and per step; the fuse is a warning; an idle run
    // logs zero candidates with no text.
    let steps: Vec<_> = log_steps(&c).await.into_iter().filter(|s| s.0 == "sweep").collect();
    assert_eq!(steps.iter().map(|s| s.1.unwrap()).collect::<Vec<_>>(), [10, 10, 5, 0]);
    assert!(steps[0].3.as_deref().unwrap().contains("fuse of 10 keys reached"));
    assert_eq!((steps[3].2, steps[3].3.as_deref()), (Some(0), None));
    let runs = count(&c, "SELECT count(*) FROM rekenserver.run_log WHERE stap = 'run' AND eind IS NOT NULL").await;
    assert_eq!(runs, 4);
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.run_log WHERE stap = 'retentie' AND fout IS NULL").await, 4);
}

#[tokio::test]
async fn old_log_rows_and_dead_letters_are_deleted_in_batches() {
    let (url, c) = fresh_roster_db().await;
    c.batch_execute(
        "INSERT INTO rekenserver.run_log (stap, start) SELECT 'run', clock_timestamp() - interval '70 days' FROM generate_series(1, 12);
         INSERT INTO rekenserver.run_log (stap, start) SELECT 'run', clock_timestamp() - interval '10 days' FROM generate_series(1, 2);
         INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id,
             conversation_handle, message_sequence_number, message_type_name, attempts, reason, dead_lettered_at)
         SELECT 'q', 's', 'c', gen_random_uuid(), gen_random_uuid(), 1, 't', 3, 'r', clock_timestamp() - (g || ' days')::interval
           FROM unnest(ARRAY[50, 55, 59, 61, 62, 63, 64]) g;",
    )
    .await
    .unwrap();
    let mut s = connect(&url).await;
    let o = sweep::run(&mut s, sweep::Options { delete_batch: 5, ..sweep::Options::default() }).await.unwrap();
    match o {
        Outcome::Ran { deleted_log_rows, deleted_dead_letters, .. } => {
            assert_eq!((deleted_log_rows, deleted_dead_letters), (12, 4));
        }
        Outcome::Skipped => panic!("not skipped"),
    }
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.run_log WHERE start < now() - interval '60 days'").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM sbworker.dead_letter").await, 3);
    let deleted: i32 =
        c.query_one("SELECT verwijderd FROM rekenserver.run_log WHERE stap = 'retentie'", &[]).await.unwrap().get(0);
    assert_eq!(deleted, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_sweeps_on_an_interval() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(8, 4, false).load(&mut loader).await.unwrap();
    let dir = TempDir::new("sweeper");
    let worker = spawn_worker(
        &dir,
        &format!("{}\n[sweep]\ninterval_ms = 100\nfuse = 3\n", sbworker::demo::worker_config_text(&url, 2)),
    );
    crate::common::calc::wait_until("every key is calculated through the sweeps", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE versie = 1").await == 8
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    assert!(count(&c, "SELECT count(*) FROM rekenserver.run_log WHERE fout LIKE '%fuse of 3%'").await >= 2);
}

#[tokio::test]
async fn a_key_whose_latest_version_was_diverted_is_sent_again_by_the_sweep_at_most_three_times() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(3, 1, false).load(&mut loader).await.unwrap();
    // Three keys in flight (no worker runs here); their calculations end in: a diversion
    // (an internal Fout), a Fout about the request itself, an error end of a diversion.
    let keys: Vec<i32> = c
        .query("SELECT dienstverband_id FROM rekenserver.berekening_log ORDER BY dienstverband_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys.len(), 3);
    // Recorded as the collector records them: the text, and whether the failure was the
    // environment's (repairable).
    let fail_open = |dv: i32, melding: &'static str, repairable: bool| {
        let c = &c;
        async move {
            c.execute(
                "SELECT rekenserver.noteer_fout(dialog_handle, $2, $3) FROM rekenserver.berekening_log \
                 WHERE dienstverband_id = $1 AND uitkomst IS NULL",
                &[&dv, &melding, &repairable],
            )
            .await
            .unwrap()
        }
    };
    fail_open(keys[0], "internal (50016): diverted after 3 failed attempts: each time the worker stopped", true).await;
    fail_open(keys[1], "invalid-value (50012): Dienst/@Datum is not a date", false).await;
    fail_open(keys[2], "error 50901: diverted after 3 failed attempts: lost", true).await;
    let mut s = connect(&url).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        match sweep::run(&mut s, sweep::Options::default()).await.unwrap() {
            Outcome::Ran { sent, repaired, .. } => runs.push((sent, repaired)),
            Outcome::Skipped => panic!("nothing else holds the lock"),
        }
        // The repairs fail again the same way.
        fail_open(keys[0], "internal (50016): diverted again", true).await;
        fail_open(keys[2], "error 50901: diverted again", true).await;
    }
    // Repaired twice more each (three failures of the same version in all), then left.
    assert_eq!(runs, [(2, 2), (2, 2), (0, 0)]);
    let sent_for = |dv: i32| {
        let c = &c;
        async move {
            c.query_one("SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = $1", &[&dv])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!((sent_for(keys[0]).await, sent_for(keys[1]).await, sent_for(keys[2]).await), (3, 1, 3));
    let steps = log_steps(&c).await;
    assert!(
        steps.iter().any(|s| s.0 == "sweep" && s.3.as_deref().is_some_and(|t| t.contains("repair: 2 keys sent again"))),
        "the run log says so: {steps:?}"
    );
}

/// Every stored result's key and version.
async fn stored(c: &Client) -> Vec<(i32, i32, i64)> {
    c.query("SELECT dienstverband_id, periode_id, versie FROM rekenserver.resultaat ORDER BY 1, 2", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The ORT amounts stored for April 2026, per employee.
async fn amounts(c: &Client) -> Vec<(i32, String)> {
    c.query(
        "SELECT dienstverband_id, waarde::text FROM rekenserver.resultaat_factor
          WHERE periode_id = 202604 AND loonfactor_code = '230' ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Runs `sbworker recompute` with `args` against `url`: its exit code and stdout.
async fn recompute(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = crate::common::within(
        120,
        "sbworker recompute",
        Command::new(BIN).arg("recompute").args(["--postgres", url]).args(args).output(),
    )
    .await
    .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// A rate-table change recomputed for one period only: the worker restarted with new
/// rate tables (weekday nights at 50% instead of 47%), `sbworker recompute --periode`
/// raises the keys of that period alone in batches, each computed again from the roster
/// as it stands; the other period's key keeps its version and result; a dry run changes
/// nothing; the fuse stops a run and says where to go on; the run log has each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_table_change_is_recomputed_for_one_period_only() {
    use sbworker::demo::roster::FIRST_ID;
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(4, 5, false).load(&mut loader).await.unwrap();
    // A key in May too: one day shift (no ORT, so no rate change touches it).
    c.batch_execute(&format!(
        "INSERT INTO rooster.periode (id, is_vier_weken, begin_datum, eind_datum) VALUES (202605, false, '2026-05-01', '2026-05-31');
         WITH d AS (INSERT INTO rooster.dienst (dienstverband_id, datum) VALUES ({FIRST_ID}, '2026-05-04') RETURNING id)
         INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type) SELECT id, '08:00', '16:00', 'D' FROM d;"
    ))
    .await
    .unwrap();
    let dir = TempDir::new("recompute");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    crate::common::calc::wait_until("every key is calculated", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat").await == 5
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    let before = stored(&c).await;
    let old_amounts = amounts(&c).await;
    // April is exported before the change.
    let april = dir.0.join("april.csv");
    let exported = Command::new(BIN)
        .args(["export", "--postgres", &url, "--periode", "202604", "--out", april.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    // Nothing is a correction yet (the correctie column, the ninth).
    assert!(std::fs::read_to_string(&april).unwrap().lines().skip(1).all(|l| l.split(',').nth(8) == Some("0")));
    // New rate tables: weekday nights at 50%.
    let text = std::fs::read_to_string(crate::common::root().join("data/cao.toml")).unwrap();
    let changed = text.replace("pct = 47, code = \"212\"", "pct = 50, code = \"212\"");
    assert_ne!(changed, text);
    let tables_file = dir.0.join("cao.toml");
    std::fs::write(&tables_file, &changed).unwrap();
    // The worker with the new tables.
    let new_tables_config = format!(
        "{}\n[engine]\ntables = {}\n",
        sbworker::demo::worker_config_text(&url, 2),
        toml::Value::String(tables_file.to_string_lossy().into_owned())
    );
    let worker = spawn_worker(&dir, &new_tables_config);
    // A dry run counts and changes nothing (no version rises, nothing is sent); choosing
    // no keys is refused; a named key that is no known key is not made one.
    let versions = "SELECT sum(versie)::bigint FROM rekenserver.sleutel";
    let (v0, sent0) = (count(&c, versions).await, count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await);
    let (code, out, _) = recompute(&url, &["--periode", "202604", "--dry-run"]).await;
    assert_eq!((code, out.trim()), (Some(0), "dry run: 4 keys would be recomputed"));
    assert_eq!(
        (count(&c, versions).await, count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await),
        (v0, sent0)
    );
    let (code, out, _) = recompute(&url, &["--sleutel", "99999:202604"]).await;
    assert_eq!((code, out.trim()), (Some(0), "0 keys recomputed in 0 transactions, 0 Vraags sent"));
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.sleutel WHERE dienstverband_id = 99999").await, 0);
    let (code, _, err) = recompute(&url, &["--sleutel", "1:202604", "--periode", "202604"]).await;
    assert_eq!(code, Some(2), "named keys and filters do not mix: {err}");
    let (code, _, err) = recompute(&url, &[]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--all"), "{err}");
    assert_eq!(stored(&c).await, before);
    // The fuse stops a run at 3 keys and says where to go on.
    let (code, out, err) = recompute(&url, &["--periode", "202604", "--batch", "2", "--fuse", "3"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("3 keys recomputed in 2 transactions, 3 Vraags sent; fuse of 3 reached"), "{out}");
    assert!(err.contains("recompute: 2 keys recomputed") && err.contains("recompute: 3 keys recomputed"), "{err}");
    let after = out.rsplit("--after ").next().unwrap().trim().to_owned();
    let (code, out, err) = recompute(&url, &["--periode", "202604", "--after", &after]).await;
    assert_eq!((code, out.trim()), (Some(0), "1 keys recomputed in 1 transactions, 1 Vraags sent"), "{err}");
    crate::common::calc::wait_until("the recomputed keys are stored", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE periode_id = 202604 AND versie = 2").await == 4
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    // April's keys rose by one and hold the new tables' results; May's key is untouched.
    let now = stored(&c).await;
    for ((dv, p, v0), (dv1, p1, v1)) in before.iter().zip(&now) {
        assert_eq!((dv, p), (dv1, p1));
        assert_eq!(*v1, if *p == 202604 { v0 + 1 } else { *v0 }, "key ({dv}, {p})");
    }
    let new_tables = sbworker::engine::Tables::from_toml(&changed).unwrap();
    let verdict = sbworker::demo::check::verify(&c, &new_tables).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    let new_amounts = amounts(&c).await;
    let changed = old_amounts.iter().zip(&new_amounts).filter(|(a, b)| a != b).count();
    assert!(changed > 0, "the nights are paid at 50% now");
    // Exported again: the April results whose figures changed, each as a correction of
    // version 1 (a result recomputed to the same figures is not sent again).
    let exported = Command::new(BIN)
        .args([
            "export",
            "--postgres",
            &url,
            "--periode",
            "202604",
            "--out",
            april.to_str().unwrap(),
            "--format",
            "json",
        ])
        .output()
        .await
        .unwrap();
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let json = std::fs::read_to_string(&april).unwrap();
    assert_eq!(json.matches("\"correctie\":true,\"vervangt_versie\":1,").count(), changed, "{json}");
    assert_eq!(json.matches("\"sleutel\"").count(), changed, "{json}");
    // Recomputed once more with the same tables: new versions, the same figures, so
    // nothing goes to payroll again (no correction for nothing).
    let worker = spawn_worker(&dir, &new_tables_config);
    let (code, _, err) = recompute(&url, &["--periode", "202604"]).await;
    assert_eq!(code, Some(0), "{err}");
    crate::common::calc::wait_until("the unchanged keys are stored", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE periode_id = 202604 AND versie = 3").await == 4
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    let exported = Command::new(BIN)
        .args(["export", "--postgres", &url, "--periode", "202604", "--out", april.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&exported.stderr);
    assert!(exported.status.success() && said.contains("exported 0 results"), "{said}");
    // The run log has each run (a dry run logs nothing): the named key that is no key,
    // the fuse's run, the rest, and the unchanged recompute.
    let runs: Vec<(Option<i32>, Option<i32>)> = c
        .query("SELECT kandidaten, verzonden FROM rekenserver.run_log WHERE stap = 'herberekening' ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(runs, [(Some(0), Some(0)), (Some(3), Some(3)), (Some(1), Some(1)), (Some(4), Some(4))]);
}

/// Every stored version keeps its evidence: three versions of a key (two roster edits)
/// are each kept with the Vraag as sent and their factors; `sbworker explain` shows the
/// latest, what changed since the one before, factor by factor, and the engine's
/// explanation of the Vraag as sent; an older version as JSON; with other rate tables
/// (a result stored by an older rate table, seen from today's), a warning naming what
/// would be computed now. The sweep prunes the evidence past its retention in batches,
/// the latest version of each key excepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stored_version_keeps_its_evidence_and_is_explained() {
    use sbworker::demo::roster::FIRST_ID;
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(2, 5, false).load(&mut loader).await.unwrap();
    let dir = TempDir::new("evidence");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    let version = |n: i64| {
        let c = &c;
        async move {
            count(
                c,
                &format!(
                    "SELECT count(*) FROM rekenserver.resultaat WHERE dienstverband_id = {FIRST_ID} AND versie = {n}"
                ),
            )
            .await
                == 1
        }
    };
    crate::common::calc::wait_until("version 1 is stored", || version(1)).await;
    for n in 2..=3 {
        crate::common::pg::lengthen_first_block(&c, FIRST_ID, 30).await;
        crate::common::calc::wait_until("the edit's version is stored", || version(n)).await;
    }
    assert_eq!(stop_worker(worker).await, Some(0));
    assert_eq!(
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.resultaat_historie
                  WHERE dienstverband_id = {FIRST_ID} AND vraag IS NOT NULL AND factoren ? '100'
                    AND rekenversie LIKE 'sbworker % tabellen %'"
            )
        )
        .await,
        3,
        "each version's Vraag and factors are kept"
    );
    let explain = |args: Vec<String>| {
        let url = url.clone();
        async move {
            let out = crate::common::within(
                60,
                "sbworker explain",
                Command::new(BIN).arg("explain").args(["--postgres", &url]).args(&args).output(),
            )
            .await
            .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let key = vec!["--dienstverband".to_owned(), FIRST_ID.to_string(), "--periode".to_owned(), P.to_string()];
    let (code, out, err) = explain(key.clone()).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("version 3 stored at"), "{out}");
    assert!(out.contains("Since version 2:\n  100: "), "the worked hours changed, factor by factor:\n{out}");
    assert!(out.contains("The Vraag as sent, explained:") && out.contains("Factors:\n  100 = "), "{out}");
    assert!(!out.contains("Warning: today's engine"), "today's engine computes what was stored:\n{out}");
    assert!(out.contains(", as today."), "computed by today's engine and tables:\n{out}");
    // A result stored by an older engine: said so, beside what computes today.
    c.batch_execute(&format!(
        "UPDATE rekenserver.resultaat_historie SET rekenversie = 'sbworker 0.0.1 tabellen 0000000000000000'
          WHERE dienstverband_id = {FIRST_ID} AND versie = 3"
    ))
    .await
    .unwrap();
    let (_, out, _) = explain(key.clone()).await;
    assert!(out.contains("Computed by sbworker 0.0.1 tabellen 0000000000000000; today: sbworker "), "{out}");
    // An older version, as JSON.
    let (code, out, err) = explain([key.clone(), vec!["--versie".into(), "1".into(), "--json".into()]].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["versie"].as_i64(), v["vorige"].is_null()), (Some(1), true), "{v}");
    assert_eq!(v["afwijkingen_nu"], serde_json::json!({}), "{v}");
    assert!(v["uitleg"].as_str().unwrap().contains("Dienstverband"), "{v}");
    // Seen with other rate tables: a warning naming the factors that would differ.
    let text = std::fs::read_to_string(crate::common::root().join("data/cao.toml")).unwrap();
    let tables = dir.0.join("other.toml");
    std::fs::write(&tables, text.replace("pct = 22, code = \"210\"", "pct = 23, code = \"210\"")).unwrap();
    let (code, out, _) =
        explain([key.clone(), vec!["--tables".into(), tables.to_string_lossy().into_owned()]].concat()).await;
    let stored_ort: i64 = count(
        &c,
        &format!(
            "SELECT count(*) FROM rekenserver.resultaat_factor
              WHERE dienstverband_id = {FIRST_ID} AND loonfactor_code = '210' AND waarde > 0"
        ),
    )
    .await;
    assert_eq!(code, Some(0));
    assert!(stored_ort > 0, "the roster (seed 5) has hours at 22%");
    assert!(
        out.contains("Warning: today's engine and rate tables compute something else") && out.contains("230: stored"),
        "the ORT amount would differ:\n{out}"
    );
    // No such version: exit 1, saying so.
    let (code, _, err) = explain([key.clone(), vec!["--versie".into(), "9".into()]].concat()).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("no stored version 9"), "{err}");
    // Retention, counted from the day a version was replaced. The collector stamped each
    // replaced version as it stored the next: the first key's versions 1 and 2, not its
    // latest (3), not the other key's only version.
    let stamped: Vec<(i32, i64, bool)> = c
        .query(
            "SELECT dienstverband_id, versie, vervangen_op IS NOT NULL FROM rekenserver.resultaat_historie ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(stamped, [(FIRST_ID, 1, true), (FIRST_ID, 2, true), (FIRST_ID, 3, false), (FIRST_ID + 1, 1, false)]);
    // Versions 1 and 2 of the first key and the other key's only version are stored 100
    // months ago, version 3 now. Version 1 was replaced (by 2) that long ago: deleted.
    // Version 2 was replaced (by 3) now: kept. The other key's only version is its latest,
    // never replaced: kept, however old.
    c.batch_execute(
        "UPDATE rekenserver.resultaat_historie SET opgeslagen_op = now() - interval '100 months',
                vervangen_op = CASE WHEN versie = 1 AND vervangen_op IS NOT NULL THEN now() - interval '100 months'
                                    ELSE vervangen_op END",
    )
    .await
    .unwrap();
    c.batch_execute(&format!(
        "UPDATE rekenserver.resultaat_historie SET opgeslagen_op = now()
          WHERE dienstverband_id = {FIRST_ID} AND versie = 3"
    ))
    .await
    .unwrap();
    let out = Command::new(BIN).args(["sweep", "--postgres", &url, "--delete-batch", "1"]).output().await.unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains(" 1 evidence rows"), "{line}");
    let kept: Vec<(i32, i64)> = c
        .query("SELECT dienstverband_id, versie FROM rekenserver.resultaat_historie ORDER BY 1, 2", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(kept, [(FIRST_ID, 2), (FIRST_ID, 3), (FIRST_ID + 1, 1)]);
}

/// The sweep's retention of the request log (`retention_days`): a request answered before
/// it goes, whatever its outcome, except a Fout of its key's current version (the sweep
/// reads it: the key waits for a roster change, repairs count at most three); requests
/// answered since, those in flight, and those of a key's open reused dialog stay. As the
/// housekeeping role (its grants).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_requests_leave_the_log_after_the_retention_but_a_keys_current_fout_stays() {
    let (url, c) = fresh_roster_db().await;
    let role = format!("retention_{}", uuid::Uuid::new_v4().simple());
    c.batch_execute(&format!("CREATE ROLE {role} LOGIN IN ROLE sbworker_housekeeping")).await.unwrap();
    c.batch_execute(
        "INSERT INTO rekenserver.sleutel (dienstverband_id, periode_id, versie, group_id, dialog_handle) VALUES
             (1, 7, 3, gen_random_uuid(), NULL), (2, 7, 1, gen_random_uuid(), NULL),
             (3, 7, 2, gen_random_uuid(), NULL), (4, 7, 2, gen_random_uuid(), '00000000-0000-0000-0000-000000000004');
         INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie,
                                                 verzonden_op, beantwoord_op, uitkomst, foutmelding)
         SELECT coalesce(h, gen_random_uuid()), gen_random_uuid(), dv, 7, v, now() - interval '100 days',
                CASE WHEN u IS NULL THEN NULL ELSE now() - make_interval(days => d) END, u, NULL
           FROM (VALUES (1, 1, 100, 'opgeslagen', NULL::uuid), (1, 2, 100, 'fout', NULL), (1, 3, 100, 'fout', NULL),
                        (2, 1, 10, 'opgeslagen', NULL), (3, 1, 100, 'vervangen', NULL), (3, 1, 100, 'verouderd', NULL),
                        (3, 2, 100, NULL, NULL), (4, 1, 100, 'opgeslagen', '00000000-0000-0000-0000-000000000004'))
                AS r(dv, v, d, u, h);",
    )
    .await
    .unwrap();
    let housekeeping = {
        let as_role = url.replace("user=postgres", &format!("user={role}"));
        assert_ne!(as_role, url);
        let (client, conn) = tokio_postgres::connect(&as_role, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    };
    let statement = sbworker::sql::statements::postgres_handoff::DELETE_REQUESTS.sql;
    let deleted: i64 = housekeeping.query_one(statement, &[&60i32, &2i64]).await.unwrap().get(0);
    assert_eq!(deleted, 2, "a batch at a time");
    let deleted: i64 = housekeeping.query_one(statement, &[&60i32, &2i64]).await.unwrap().get(0);
    assert_eq!(deleted, 2);
    let deleted: i64 = housekeeping.query_one(statement, &[&60i32, &2i64]).await.unwrap().get(0);
    assert_eq!(deleted, 0);
    let kept: Vec<(i32, i64, Option<String>)> = c
        .query("SELECT dienstverband_id, versie, uitkomst FROM rekenserver.berekening_log ORDER BY 1, 2", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let fout = Some("fout".to_owned());
    // Kept: the current Fout; a request sent 100 days ago but answered 10 days ago; one in
    // flight; the last answered request of a key's open reused dialog.
    let stored = Some("opgeslagen".to_owned());
    assert_eq!(kept, [(1, 3, fout), (2, 1, stored.clone()), (3, 2, None), (4, 1, stored)]);
}

/// The retention's statements find their rows through their indexes: the cutoff is an
/// index condition (a volatile `clock_timestamp()` would only filter a walk of the whole
/// index, or a scan of the table). Sequential scans off, so that the tiny test tables
/// do not decide the plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_statements_seek_their_indexes_by_the_cutoff() {
    let (_url, c) = fresh_roster_db().await;
    c.batch_execute("SET enable_seqscan = off").await.unwrap();
    for (statement, index, condition) in [
        (
            sbworker::sql::statements::postgres_handoff::DELETE_EVIDENCE,
            "resultaat_historie_vervangen",
            "vervangen_op <",
        ),
        (sbworker::sql::statements::postgres_handoff::DELETE_REQUESTS, "berekening_log_beantwoord", "beantwoord_op <"),
    ] {
        let plan: Vec<String> = c
            .query(&format!("EXPLAIN {}", statement.sql), &[&60i32, &10i64])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let plan = plan.join("\n");
        // "Index Scan using …" or "Bitmap Index Scan on …", then its condition.
        let at = plan
            .find(&format!("using {index}"))
            .or_else(|| plan.find(&format!("Index Scan on {index}")))
            .unwrap_or_else(|| panic!("{index} not used:\n{plan}"));
        let cond = plan[at..].lines().find(|l| l.contains("Index Cond")).unwrap_or_default();
        assert!(cond.contains(condition), "{index}: the cutoff is no index condition:\n{plan}");
    }
}

/// An install that predates `vervangen_op` (the evidence's replacement time) is brought
/// up by installing again: each replaced version takes the time its successor was
/// stored, a key's latest stays unstamped, and the retention's index is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_over_evidence_without_its_replacement_time_fills_it_in() {
    let (url, c) = fresh_roster_db().await;
    c.batch_execute(
        "INSERT INTO rekenserver.resultaat_historie (dienstverband_id, periode_id, versie, opgeslagen_op) VALUES
             (1, 7, 1, '2020-01-01Z'), (1, 7, 2, '2020-02-01Z'), (1, 7, 5, '2020-03-01Z'), (2, 7, 1, '2020-01-15Z');
         ALTER TABLE rekenserver.resultaat_historie DROP COLUMN vervangen_op;",
    )
    .await
    .unwrap();
    let out = Command::new(BIN).args(["install", "--postgres", &url, "--roster"]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<(i32, i64, Option<String>)> = c
        .query(
            "SELECT dienstverband_id, versie, to_char(vervangen_op AT TIME ZONE 'UTC', 'YYYY-MM-DD')
               FROM rekenserver.resultaat_historie ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let day = |d: &str| Some(d.to_owned());
    assert_eq!(rows, [(1, 1, day("2020-02-01")), (1, 2, day("2020-03-01")), (1, 5, None), (2, 1, None)]);
    assert_eq!(count(&c, "SELECT count(*) FROM pg_indexes WHERE indexname = 'resultaat_historie_vervangen'").await, 1);
}

/// A result claimed under a lease (payroll may have imported it) and replaced by a newer
/// version before the lease is confirmed goes out again as a correction of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_result_replaced_before_its_confirmation_comes_back_as_a_correction() {
    use sbworker::demo::roster::FIRST_ID;
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(1, 3, false).load(&mut loader).await.unwrap();
    let dir = TempDir::new("lease-correction");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    crate::common::calc::wait_until("version 1 is stored", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE versie = 1").await == 1
    })
    .await;
    let file = dir.0.join("out.json");
    let export = |mode: &'static str| {
        let (url, file) = (url.clone(), file.clone());
        async move {
            let out = Command::new(BIN)
                .args(["export", "--postgres", &url, "--periode", "202604", "--format", "json", "--mode", mode])
                .arg("--out")
                .arg(&file)
                .output()
                .await
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            std::fs::read_to_string(&file).unwrap()
        }
    };
    let leased = export("lease").await;
    assert!(leased.contains("\"versie\":1,\"correctie\":false"), "{leased}");
    // Not confirmed; a roster edit makes version 2.
    crate::common::pg::lengthen_first_block(&c, FIRST_ID, 15).await;
    crate::common::calc::wait_until("version 2 is stored", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE versie = 2").await == 1
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    let again = export("once").await;
    assert!(again.contains("\"versie\":2,\"correctie\":true,\"vervangt_versie\":1,"), "{again}");
}

/// A recompute does not keep planners waiting: its Vraags go on a contract of their own
/// at a lower conversation priority, so a planner's edit committed after a recompute of
/// every key is computed and stored before the recompute's keys (RECEIVE serves the
/// higher level first, on both queues). Measured by the order in which the results were
/// stored (the evidence table's ids), with one reader, so the order is the broker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planners_edit_is_answered_before_a_running_recompute() {
    use sbworker::demo::roster::FIRST_ID;
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    let n = 12;
    Roster::generate(n, 9, false).load(&mut loader).await.unwrap();
    let dir = TempDir::new("recompute-priority");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 1));
    crate::common::calc::wait_until("every key is calculated", || async {
        count(&c, "SELECT count(*) FROM rekenserver.resultaat").await == n as i64
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    let mark = count(&c, "SELECT max(id) FROM rekenserver.resultaat_historie").await;
    // With no worker running: a recompute of every key, then a planner's edit.
    let (code, out, err) = recompute(&url, &["--periode", "202604"]).await;
    assert_eq!(
        (code, out.trim()),
        (Some(0), format!("{n} keys recomputed in 1 transactions, {n} Vraags sent").as_str()),
        "{err}"
    );
    let planner = FIRST_ID + n as i32 - 1;
    crate::common::pg::lengthen_first_block(&c, planner, 15).await;
    let levels: Vec<(String, i16)> = c
        .query("SELECT service, priority FROM sb.endpoint WHERE NOT is_initiator ORDER BY created_at", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(levels.iter().filter(|l| l.1 == 3).count(), n, "the recompute's requests are at level 3: {levels:?}");
    assert_eq!(levels.iter().filter(|l| l.1 == 5).count(), 1, "the planner's at the default: {levels:?}");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 1));
    crate::common::calc::wait_until("the edit and the recompute are stored", || async {
        count(&c, &format!("SELECT count(*) FROM rekenserver.resultaat_historie WHERE id > {mark}")).await >= n as i64
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    // The order of storing since the recompute began.
    let order: Vec<(i32, i64)> = c
        .query(
            "SELECT dienstverband_id, versie FROM rekenserver.resultaat_historie WHERE id > $1 ORDER BY id",
            &[&mark],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let at = order.iter().position(|&(dv, v)| dv == planner && v == 3);
    eprintln!("stored after the recompute began, in order: {order:?}; the planner's edit at {at:?} of {}", order.len());
    assert_eq!(at, Some(0), "the planner's edit is stored first: {order:?}");
    // Every key is at its newest version, the planner's key at its edit.
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.resultaat r JOIN rekenserver.sleutel s USING (dienstverband_id, periode_id) WHERE r.versie = s.versie").await, n as i64);
}

/// Stores version `versie` of key (dv, P) through the collector's function, with the
/// factors 100 and 230 at `hours` and `amount`; its outcome.
async fn store(c: &Client, dv: i32, versie: i64, hours: &str, amount: &str) -> String {
    crate::common::pg::store_version(c, (dv, P), versie, hours, amount).await
}

/// The versions of (dv, P) whose evidence says they went out to payroll.
async fn stamped(c: &Client, dv: i32) -> Vec<i64> {
    c.query(
        "SELECT versie FROM rekenserver.resultaat_historie
          WHERE dienstverband_id = $1 AND periode_id = $2 AND geexporteerd_op IS NOT NULL ORDER BY versie",
        &[&dv, &P],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test]
async fn a_version_with_the_same_figures_leaves_the_correction_naming_what_payroll_has() {
    // Export, then a version with the same figures (a recompute that changed nothing),
    // then a real change, then export: the correction replaces the version payroll
    // received (1), not the same-figures version (2) it never saw; the evidence marks
    // versions 1 and 3 as gone out, never 2. Once, and leased with the confirmation
    // coming after the same-figures version.
    let (_url, mut c) = fresh_roster_db().await;
    // Employee 2 under a lease, then employee 1 once.
    assert_eq!(store(&c, 2, 1, "8", "10.00").await, "opgeslagen");
    let (lease, taken) = claim(&mut c, LEASE).await;
    assert_eq!(taken, BTreeSet::from([2]));
    assert_eq!(store(&c, 1, 1, "8", "10.00").await, "opgeslagen");
    let (_, taken) = claim(&mut c, Mode::Once).await;
    assert_eq!(taken, BTreeSet::from([1]));
    // Version 2: the same figures. Both keep their export state.
    for dv in [1, 2] {
        assert_eq!(store(&c, dv, 2, "8", "10.00").await, "opgeslagen");
    }
    assert_eq!(
        count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE versie = 2 AND export_status <> 0").await,
        2
    );
    // The lease is confirmed now: it was version 1 that went out.
    assert_eq!(export::ack(&c, lease).await.unwrap(), 1);
    assert_eq!((stamped(&c, 1).await, stamped(&c, 2).await), (vec![1], vec![1]));
    // Version 3: a real change. Exported as a correction of version 1.
    for dv in [1, 2] {
        assert_eq!(store(&c, dv, 3, "9", "12.50").await, "opgeslagen");
    }
    let tx = c.transaction().await.unwrap();
    let batch = export::claim(&tx, P, Mode::Once).await.unwrap();
    tx.commit().await.unwrap();
    let replaced: BTreeSet<(i32, i64, Option<i64>)> =
        batch.rows.iter().map(|r| (r.dienstverband_id, r.versie, r.vervangt_versie)).collect();
    assert_eq!(replaced, BTreeSet::from([(1, 3, Some(1)), (2, 3, Some(1))]));
    assert_eq!((stamped(&c, 1).await, stamped(&c, 2).await), (vec![1, 3], vec![1, 3]));
    // Version 4 answers a factor more, at 0 (as a release that adds factors does): the
    // same figures, no correction; a factor the stored result has at 0 and the new one
    // lacks, likewise.
    let outcome: String = c
        .query_one(
            "SELECT rekenserver.sla_antwoord_op(gen_random_uuid(), gen_random_uuid(), 1, $1, 4, false,
                    ARRAY[5, 5, 5], ARRAY['100', '230', '330'], ARRAY[9, 12.50, 0]::numeric[])",
            &[&P],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(outcome, "opgeslagen");
    assert_eq!(store(&c, 1, 5, "9", "12.50").await, "opgeslagen");
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM rekenserver.resultaat WHERE dienstverband_id = 1 AND versie = 5 AND export_status = 2"
        )
        .await,
        1,
        "a factor at 0 is no change of figures"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_deadlock_with_a_recompute_the_planners_edit_survives() {
    // An aimed deadlock: a recompute's transaction holds key 1; a planner's transaction
    // edits key 2, then key 1, and commits (its deferred trigger locks key 2, then waits
    // for key 1); then the recompute asks for key 2. PostgreSQL's victim would be the
    // planner (its deadlock_timeout, 1 s, runs out first: it waited first); the
    // recompute gives up its wait after 200 ms (55P03) instead, and once it rolls back
    // the planner's commit goes through. Taken again, the batch succeeds.
    use sbworker::demo::roster::FIRST_ID;
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(4, 5, false).load(&mut loader).await.unwrap();
    let (k1, k2) = (FIRST_ID, FIRST_ID + 1);
    let known =
        format!("SELECT count(*) FROM rekenserver.sleutel WHERE dienstverband_id IN ({k1}, {k2}) AND periode_id = {P}");
    assert_eq!(count(&c, &known).await, 2);
    let versions =
        format!("SELECT sum(versie)::bigint FROM rekenserver.sleutel WHERE dienstverband_id IN ({k1}, {k2})");
    let before = count(&c, &versions).await;
    let mut recompute = connect(&url).await;
    let batch = "SELECT rekenserver.herbereken(ARRAY[$1::int], ARRAY[$2::int])";
    let rt = recompute.transaction().await.unwrap();
    rt.query_one(batch, &[&k1, &P]).await.unwrap();
    let mut planner = connect(&url).await;
    let pid: i32 = planner.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let edit = |dv: i32| {
        format!(
            "UPDATE rooster.tijdblok SET eind_tijd = eind_tijd WHERE dienst_id IN
               (SELECT id FROM rooster.dienst WHERE dienstverband_id = {dv} AND datum BETWEEN '2026-04-01' AND '2026-04-30');"
        )
    };
    let statements = format!("{}{}", edit(k2), edit(k1));
    let planned = tokio::spawn(async move {
        let tx = planner.transaction().await.unwrap();
        tx.batch_execute(&statements).await.unwrap();
        tx.commit().await
    });
    crate::common::calc::wait_until("the planner's commit waits for key 1", || async {
        count(&c, &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Lock'"))
            .await
            == 1
    })
    .await;
    let e = rt.query_one(batch, &[&k2, &P]).await.unwrap_err();
    assert_eq!(e.code(), Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE), "{e:?}");
    rt.rollback().await.unwrap();
    let committed = crate::common::within(60, "the planner's commit", planned).await.unwrap();
    assert!(committed.is_ok(), "the planner's edit must survive: {committed:?}");
    // The planner's edit raised both keys once; the batch, taken again, once more.
    assert_eq!(count(&c, &versions).await, before + 2);
    let rt = recompute.transaction().await.unwrap();
    let sent: i32 =
        rt.query_one("SELECT rekenserver.herbereken($1, $2)", &[&vec![k1, k2], &vec![P, P]]).await.unwrap().get(0);
    rt.commit().await.unwrap();
    assert_eq!((sent, count(&c, &versions).await), (2, before + 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_warnings_reach_payroll_with_its_figures() {
    // The engine's warnings are stored with the result and exported with it: the codes
    // in the CSV, the texts in the JSON, and a count on stderr. One employee's contract
    // is set to 42 hours a week under CAO Ziekenhuizen (art. 6.1 lid 2 allows 40).
    use sbworker::demo::roster::FIRST_ID;
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(3, 5, false).load(&mut loader).await.unwrap();
    c.batch_execute(&format!(
        "UPDATE rooster.dienstverband SET parttime_uren = 42, cao_id = 100 WHERE id = {FIRST_ID}"
    ))
    .await
    .unwrap();
    let dir = TempDir::new("warnings");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    crate::common::calc::wait_until("every key holds its latest version", || async {
        count(
            &c,
            "SELECT count(*) FROM rekenserver.sleutel s LEFT JOIN rekenserver.resultaat r USING (dienstverband_id, periode_id)
              WHERE r.versie IS DISTINCT FROM s.versie",
        )
        .await
            == 0
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
    let json_file = dir.0.join("april.json");
    let out = Command::new(BIN)
        .args(["export", "--postgres", &url, "--periode", &P.to_string(), "--format", "json", "--mode", "lease"])
        .arg("--out")
        .arg(&json_file)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // (The demo roster has warnings of its own, overlapping blocks among them.)
    assert!(said.contains("results carry warnings (") && said.contains("contract-boven-maximum 1"), "{said}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_file).unwrap()).unwrap();
    let results = json["results"].as_array().unwrap();
    assert!(results.len() >= 2);
    for r in results {
        let warnings = r["waarschuwingen"].as_array().unwrap();
        let above: Vec<_> = warnings.iter().filter(|w| w["code"] == "contract-boven-maximum").collect();
        if r["dienstverband_id"] == FIRST_ID {
            assert_eq!(above.len(), 1, "{r}");
            assert!(above[0]["tekst"].as_str().unwrap().contains("42"), "{r}");
        } else {
            assert!(above.is_empty(), "{r}");
        }
    }
    // The CSV, after the lease is given back: the code on each of its rows.
    c.batch_execute("UPDATE rekenserver.resultaat SET export_status = 0").await.unwrap();
    let csv_file = dir.0.join("april.csv");
    let out = Command::new(BIN)
        .args(["export", "--postgres", &url, "--periode", &P.to_string(), "--out"])
        .arg(&csv_file)
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let csv = std::fs::read_to_string(&csv_file).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",correctie,vervangt_versie,waarschuwingen"));
    for line in csv.lines().skip(1) {
        let of_first = line.split(',').nth(2) == Some(&FIRST_ID.to_string());
        let codes = line.rsplit(',').next().unwrap();
        assert_eq!(codes.split(';').any(|c| c == "contract-boven-maximum"), of_first, "{line}");
    }
}
