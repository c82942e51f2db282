//! The hand-off's and the operations' half of the conformance suite: each scenario is
//! written once against the one seam the commands use (`sbworker::broker::Database`,
//! with `sbworker::handoff::Backend`, the recompute's backend and `sbworker::ops::Backend`)
//! and run on every back end with the same assertions: PostgreSQL directly, and SQL
//! Server's procedures over TDS through the emulator (which runs the PostgreSQL hand-off
//! behind them: the T-SQL bodies are checked by the script tests and the doc review).
//! Scenarios: a once claim rolled back marks nothing and committed is never given again;
//! a lease confirmed once; a sweep skipped while another holds its lock, and one stopped
//! by its fuse; a recompute's dry run and a named key; a recompute's progress, the runs,
//! the keys searched and a key's log (the web page's); every stored version explained; a
//! dead letter listed, shown, replayed once and purged; the side and the status; the
//! roster side's commands refusing the calculation side.

use std::collections::BTreeSet;
use std::sync::Arc;

use sbworker::broker::Database;
use sbworker::broker::postgres::PostgresTransport;
use sbworker::config::{BrokerConfig, BrokerKind};
use sbworker::demo::REKEN_QUEUE;
use sbworker::demo::roster::Roster;
use sbworker::emulator::server::Faults;
use sbworker::handoff::Backend as _;
use sbworker::handoff::export::Mode;
use sbworker::handoff::recompute::{self, Selection};
use sbworker::handoff::sweep::{self, Outcome};
use sbworker::ops::Backend as _;
use sbworker::transport::{DeadLetter, Session as _, Side, Transport as _};
use tokio_postgres::Client;

use crate::common::on_every_back_end;
use crate::common::pg::{fresh_roster_db, store_version, stored_results};
use crate::common::tds::emulator_with;

const P: i32 = 202604;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    Tds,
}

impl Kind {
    fn broker(self) -> BrokerKind {
        match self {
            Kind::Postgres => BrokerKind::Postgres,
            Kind::Tds => BrokerKind::Mssql,
        }
    }
}

/// A fresh roster database; a plain client on it (the test's look at the tables); and
/// the connection the commands use: the database itself, or the emulator before it.
struct World {
    url: String,
    c: Client,
    broker: BrokerConfig,
    _tds: Option<tokio::sync::watch::Sender<bool>>,
}

impl World {
    async fn new(kind: Kind) -> Self {
        let (url, c) = fresh_roster_db().await;
        let (broker, tds) = match kind {
            Kind::Postgres => (BrokerConfig { kind: BrokerKind::Postgres, connection: url.clone() }, None),
            Kind::Tds => {
                let (conn, stop) = emulator_with(&url, Arc::new(Faults::default())).await;
                (BrokerConfig { kind: BrokerKind::Mssql, connection: conn }, Some(stop))
            }
        };
        Self { url, c, broker, _tds: tds }
    }

    /// A connection of its own, as each command opens one.
    async fn db(&self) -> Database {
        Database::connect(&self.broker, None).await.unwrap()
    }

    async fn count(&self, sql: &str) -> i64 {
        self.c.query_one(sql, &[]).await.unwrap().get(0)
    }

    /// The roster of `n` employees loaded with sending off (a bulk import): every key is
    /// stale, none sent.
    async fn bulk_import(&self, n: usize) -> i64 {
        let (mut loader, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
        Roster::generate(n, 21, false).load(&mut loader).await.unwrap();
        self.count("SELECT count(*) FROM rekenserver.sleutel").await
    }
}

/// Claims and commits; the employees taken.
async fn claimed(db: &mut Database, mode: Mode) -> (uuid::Uuid, BTreeSet<i32>) {
    let b = db.claim(P, mode).await.unwrap();
    db.commit_claim().await.unwrap();
    (b.id, b.rows.iter().map(|r| r.dienstverband_id).collect())
}

async fn a_once_claim_rolled_back_marks_nothing_and_committed_is_never_given_again(kind: Kind) {
    let w = World::new(kind).await;
    stored_results(&w.c, 10, P).await;
    let mut db = w.db().await;
    let b = db.claim(P, Mode::Once).await.unwrap();
    assert_eq!(b.rows.len(), 30, "ten results of three factors");
    assert_eq!(b.results(), 10);
    db.rollback_claim().await.unwrap();
    assert_eq!(w.count("SELECT count(*) FROM rekenserver.resultaat WHERE export_status <> 0").await, 0);
    let (_, got) = claimed(&mut db, Mode::Once).await;
    assert_eq!(got, (1..=10).collect());
    assert_eq!(w.count("SELECT count(*) FROM rekenserver.resultaat WHERE export_status <> 0").await, 10);
    // Another connection, another claim: nothing is given twice.
    assert!(claimed(&mut w.db().await, Mode::Once).await.1.is_empty());
    // The amounts exactly as stored.
    let r = &b.rows.iter().find(|r| r.dienstverband_id == 3 && r.loonfactor_code == "120").unwrap();
    assert_eq!(r.waarde, "3.7500", "as the column keeps it (numeric, four decimals)");
}

async fn a_lease_is_confirmed_once_and_an_unknown_batch_confirms_nothing(kind: Kind) {
    let w = World::new(kind).await;
    stored_results(&w.c, 4, P).await;
    let mut db = w.db().await;
    let lease = Mode::Lease { seconds: 900.0 };
    let (batch, got) = claimed(&mut db, lease).await;
    assert_eq!(got.len(), 4);
    // Within the lease nothing comes back.
    assert!(claimed(&mut db, lease).await.1.is_empty());
    assert_eq!(db.ack(uuid::Uuid::new_v4()).await.unwrap(), 0);
    assert_eq!(db.ack(batch).await.unwrap(), 4);
    assert_eq!(db.ack(batch).await.unwrap(), 0, "a batch is confirmed once");
    assert_eq!(w.count("SELECT count(*) FROM rekenserver.resultaat WHERE export_status = 2").await, 4);
}

async fn a_sweep_is_skipped_while_another_holds_its_lock_and_stopped_by_its_fuse(kind: Kind) {
    let w = World::new(kind).await;
    let keys = w.bulk_import(6).await;
    assert!(keys >= 6);
    // Another sweep's session holds the lock: this one is skipped, and logs it.
    let (holder, conn) = tokio_postgres::connect(&w.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let locked: bool =
        holder.query_one("SELECT pg_try_advisory_lock(hashtext('rekenserver.sweep'))", &[]).await.unwrap().get(0);
    assert!(locked);
    assert_eq!(w.db().await.sweep(sweep::Options::default()).await.unwrap(), Outcome::Skipped);
    assert_eq!(w.count("SELECT count(*) FROM rekenserver.run_log WHERE fout LIKE 'skipped%'").await, 1);
    let freed: bool =
        holder.query_one("SELECT pg_advisory_unlock(hashtext('rekenserver.sweep'))", &[]).await.unwrap().get(0);
    assert!(freed);
    // The fuse: three keys sent, the rest for the next run.
    let opts = sweep::Options { fuse: 3, ..sweep::Options::default() };
    match w.db().await.sweep(opts).await.unwrap() {
        Outcome::Ran { candidates, sent, fuse_reached, .. } => {
            assert_eq!((candidates, sent, fuse_reached), (3, 3, true));
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(w.count("SELECT count(*) FROM rekenserver.berekening_log").await, 3);
}

async fn a_recompute_counts_in_a_dry_run_and_sends_a_named_key(kind: Kind) {
    let w = World::new(kind).await;
    let keys = w.bulk_import(5).await;
    let mut db = w.db().await;
    let all = Selection { periodes: vec![P], ..Selection::default() };
    let dry = recompute::Options { batch: 2, fuse: 1000, dry_run: true };
    assert_eq!(
        recompute::run(&mut db, &all, dry, |_, _| {}).await.unwrap(),
        recompute::Outcome::Counted { keys, fuse_reached: false }
    );
    let row =
        w.c.query_one("SELECT dienstverband_id, periode_id FROM rekenserver.sleutel ORDER BY 1, 2 LIMIT 1", &[])
            .await
            .unwrap();
    let (dv, periode): (i32, i32) = (row.get(0), row.get(1));
    let version = || async {
        let v: i64 =
            w.c.query_one(
                "SELECT versie FROM rekenserver.sleutel WHERE dienstverband_id = $1 AND periode_id = $2",
                &[&dv, &periode],
            )
            .await
            .unwrap()
            .get(0);
        v
    };
    let before = version().await;
    let named = Selection { keys: vec![(dv, periode), (999_999, periode)], ..Selection::default() };
    let ran = recompute::run(&mut db, &named, recompute::Options { batch: 10, fuse: 1000, dry_run: false }, |_, _| {})
        .await
        .unwrap();
    assert!(
        matches!(ran, recompute::Outcome::Ran { keys: 1, sent: 1, fuse_reached: false, .. }),
        "the known key alone: {ran:?}"
    );
    let after = version().await;
    assert_eq!(after, before + 1, "a recompute raises the key's version, as an edit does");
    assert_eq!(w.count("SELECT count(*) FROM rekenserver.run_log WHERE stap = 'herberekening' AND eind IS NOT NULL AND fout IS NULL").await, 1);
}

/// The recompute's back end, watched: before each batch after the first, the run's row
/// (read with a plain client) shows the progress so far, with no end yet.
struct Watched<'w> {
    db: Database,
    c: &'w Client,
    run: Option<i64>,
    seen: Vec<(Option<i32>, Option<i32>, bool)>,
}

impl recompute::Backend for Watched<'_> {
    type Error = sbworker::broker::BrokerError;
    async fn begin(&mut self) -> Result<Option<i64>, Self::Error> {
        self.run = recompute::Backend::begin(&mut self.db).await?;
        Ok(self.run)
    }
    async fn progress(&mut self, run: i64, keys: i64, sent: i64) -> Result<(), Self::Error> {
        self.db.progress(run, keys, sent).await
    }
    async fn end(&mut self, run: i64, keys: i64, sent: i64, text: Option<String>) -> Result<(), Self::Error> {
        self.db.end(run, keys, sent, text).await
    }
    async fn page(
        &mut self,
        sel: &Selection,
        after: Option<(i32, i32)>,
        n: i64,
    ) -> Result<Vec<(i32, i32)>, Self::Error> {
        self.db.page(sel, after, n).await
    }
    async fn batch(&mut self, keys: &[(i32, i32)]) -> Result<i64, Self::Error> {
        let row = self
            .c
            .query_one(
                "SELECT kandidaten, verzonden, eind IS NULL FROM rekenserver.run_log WHERE id = $1",
                &[&self.run],
            )
            .await
            .unwrap();
        self.seen.push((row.get(0), row.get(1), row.get(2)));
        recompute::Backend::batch(&mut self.db, keys).await
    }
    fn transient(&self, e: &Self::Error) -> bool {
        self.db.transient(e)
    }
    fn message(e: &Self::Error) -> String {
        Database::message(e)
    }
}

/// What the web page reads of the hand-off: a recompute's progress on its run row while
/// it runs, the runs newest first, the keys searched and paged (by dienstverband, by
/// state), and a key's calculation log.
async fn a_recompute_shows_its_progress_and_the_keys_are_searched_paged_and_timed(kind: Kind) {
    use sbworker::handoff::keys::{KeySearch, Staat};
    let w = World::new(kind).await;
    let keys = w.bulk_import(5).await;
    let mut watched = Watched { db: w.db().await, c: &w.c, run: None, seen: Vec::new() };
    let all = Selection { periodes: vec![P], ..Selection::default() };
    let ran =
        recompute::run(&mut watched, &all, recompute::Options { batch: 2, fuse: 1000, dry_run: false }, |_, _| {})
            .await
            .unwrap();
    assert!(matches!(ran, recompute::Outcome::Ran { batches: 3, .. }), "{ran:?}");
    assert_eq!(
        watched.seen,
        [(None, None, true), (Some(2), Some(2), true), (Some(4), Some(4), true)],
        "the progress of the batches before, on a row not ended yet"
    );
    let mut db = w.db().await;
    let runs = db.runs(10).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!((runs[0].stap.as_str(), runs[0].kandidaten, runs[0].eind.is_some()), ("herberekening", Some(5), true));
    assert!(db.export_batches(10).await.unwrap().is_empty(), "nothing exported");

    // Every key, paged by two; then one dienstverband; then by state.
    let every = KeySearch::default();
    let first = db.search_keys(&every, None, 2).await.unwrap();
    let last = first.last().map(|k| (k.dienstverband, k.periode));
    let second = db.search_keys(&every, last, 10).await.unwrap();
    assert_eq!(first.len() + second.len(), keys as usize);
    assert!(second.iter().all(|k| (k.dienstverband, k.periode) > last.unwrap()), "after the cursor");
    let one = &first[0];
    assert!(one.cao.is_some() && one.opgeslagen_versie.is_none() && one.fout.is_none(), "{one:?}");
    let by_dv = KeySearch { dienstverband: Some(one.dienstverband), ..KeySearch::default() };
    assert_eq!(db.search_keys(&by_dv, None, 10).await.unwrap().len(), 1);
    let waiting = KeySearch { staat: Some(Staat::Wacht), ..KeySearch::default() };
    assert_eq!(db.search_keys(&waiting, None, 10).await.unwrap().len(), keys as usize, "none stored");
    let stored = KeySearch { staat: Some(Staat::Opgeslagen), ..KeySearch::default() };
    assert!(db.search_keys(&stored, None, 10).await.unwrap().is_empty());
    let cao = KeySearch { cao: Some("no-such-cao".into()), ..KeySearch::default() };
    assert!(db.search_keys(&cao, None, 10).await.unwrap().is_empty());
    // The key's log: its recompute's Vraag, in flight.
    let sent = db.timeline(one.dienstverband, one.periode).await.unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((sent[0].versie, sent[0].uitkomst.as_deref()), (one.versie, None));
    // The plots' numbers: none answered yet; then two answered this minute, 120 and
    // 200 ms after they were sent, one of them a Fout, and one found lost (counted, not
    // timed).
    assert!(db.rates(60).await.unwrap().is_empty());
    w.c.batch_execute(
        "WITH k AS (SELECT dialog_handle, row_number() OVER (ORDER BY dienstverband_id) AS n \
                      FROM rekenserver.berekening_log) \
         UPDATE rekenserver.berekening_log l \
            SET uitkomst = CASE k.n WHEN 1 THEN 'opgeslagen' ELSE 'fout' END, \
                beantwoord_op = clock_timestamp(), \
                verzonden_op = clock_timestamp() - CASE k.n WHEN 1 THEN interval '120 ms' WHEN 2 THEN interval '200 ms' \
                                                   ELSE interval '3 hours' END, \
                foutmelding = CASE k.n WHEN 1 THEN NULL WHEN 2 THEN 'the calculation refused it' \
                                  ELSE 'lost: the dialog no longer exists' END \
           FROM k WHERE k.dialog_handle = l.dialog_handle AND k.n <= 3",
    )
    .await
    .unwrap();
    let rates = db.rates(60).await.unwrap();
    assert_eq!(rates.len(), 1, "{rates:?}");
    let r = rates[0];
    assert_eq!((r.minutes_ago, r.answered, r.failed), (0, 3, 2), "{r:?}");
    let (p50, p95) = (r.p50_ms.unwrap(), r.p95_ms.unwrap());
    assert!((159..=161).contains(&p50) && (195..=197).contains(&p95), "median of 120 and 200, and its 95th: {r:?}");
    // Two keys are in Fout now (their current version), found, paged and by their text.
    let in_fout = KeySearch { staat: Some(Staat::Fout), ..KeySearch::default() };
    let both = db.search_keys(&in_fout, None, 10).await.unwrap();
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both.iter().all(|k| k.fout.is_some()), "{both:?}");
    let first = db.search_keys(&in_fout, None, 1).await.unwrap();
    let cursor = first.last().map(|k| (k.dienstverband, k.periode));
    let next = db.search_keys(&in_fout, cursor, 10).await.unwrap();
    assert_eq!((first.len(), next.len()), (1, 1));
    assert!((next[0].dienstverband, next[0].periode) > cursor.unwrap());
    let refused = KeySearch { reden: Some("REFUSED".into()), ..KeySearch::default() };
    let found = db.search_keys(&refused, None, 10).await.unwrap();
    assert_eq!(found.len(), 1, "the text in either case: {found:?}");
    assert_eq!(found[0].fout.as_deref(), Some("the calculation refused it"));
    let waiting = KeySearch { staat: Some(Staat::Wacht), ..KeySearch::default() };
    assert_eq!(db.search_keys(&waiting, None, 10).await.unwrap().len(), keys as usize - 2);
}

async fn every_stored_version_is_read_back_with_its_factors(kind: Kind) {
    let w = World::new(kind).await;
    assert_eq!(store_version(&w.c, (7, P), 1, "8", "10.00").await, "opgeslagen");
    assert_eq!(store_version(&w.c, (7, P), 2, "9", "12.50").await, "opgeslagen");
    let versions = w.db().await.versions(7, P).await.unwrap();
    assert_eq!(versions.iter().map(|v| v.versie).collect::<Vec<_>>(), [1, 2]);
    let factors = |i: usize| versions[i].factoren.iter().map(|(c, d)| format!("{c}={d}")).collect::<Vec<_>>().join(" ");
    assert_eq!(factors(0), "100=8 230=10.00");
    assert_eq!(factors(1), "100=9 230=12.50");
    assert!(versions.iter().all(|v| v.geexporteerd_op.is_none() && !v.opgeslagen_op.is_empty()));
    assert!(w.db().await.versions(8, P).await.unwrap().is_empty(), "a key never stored has no versions");
}

async fn a_dead_letter_is_listed_shown_replayed_once_and_purged(kind: Kind) {
    let w = World::new(kind).await;
    // One key sent (sending on), its Vraag received and diverted as a worker diverts it.
    let (mut loader, conn) = tokio_postgres::connect(&w.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    Roster::generate(1, 5, false).load(&mut loader).await.unwrap();
    let mut s = PostgresTransport::new(&w.url).open().await.unwrap();
    s.begin().await.unwrap();
    let got = s.receive(REKEN_QUEUE, 1, None, std::time::Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.len(), 1);
    s.dead_letter(DeadLetter { queue: REKEN_QUEUE, message: &got[0], attempts: 3, reason: "conformance" })
        .await
        .unwrap();
    s.commit().await.unwrap();

    let mut db = w.db().await;
    let letters = db.dead_letters(None, 100).await.unwrap();
    assert_eq!(letters.len(), 1);
    let id = letters[0].id;
    assert_eq!((letters[0].reason.as_str(), letters[0].attempts, letters[0].replays), ("conformance", 3, 0));
    assert!(letters[0].message_type.ends_with("/Vraag"));
    let shown = db.dead_letter(id).await.unwrap().expect("the letter");
    assert_eq!(shown.body.as_deref(), Some(got[0].body.as_slice()), "the body exactly as received");
    assert!(db.dead_letter(id + 1000).await.unwrap().is_none());
    // Replayed once: a new dialog carries it; replayed again only when asked for.
    let handle = db.replay(id, "conformance", false).await.unwrap().expect("a new dialog");
    assert_ne!(handle, got[0].conversation_handle);
    assert_eq!(db.replay(id, "conformance", true).await.unwrap(), None, "left alone: replayed already");
    let shown = db.dead_letter(id).await.unwrap().unwrap();
    assert_eq!((shown.replays, shown.replay_handle), (1, Some(handle)));
    assert!(shown.replayed_by.unwrap().starts_with("conformance"));
    assert_eq!(
        w.count("SELECT count(*) FROM sb.message").await,
        1,
        "the Vraag waits again on the calculation's queue, on its new dialog"
    );
    // Purged: nothing diverted before the epoch; everything before tomorrow.
    assert_eq!(db.purge_batch("1970-01-01T00:00:00.000Z", 100).await.unwrap(), 0);
    assert_eq!(db.purge_batch("2999-01-01T00:00:00.000Z", 100).await.unwrap(), 1);
    assert!(db.dead_letters(None, 100).await.unwrap().is_empty());
}

async fn the_side_and_the_status_read_alike(kind: Kind) {
    let w = World::new(kind).await;
    let mut db = w.db().await;
    assert_eq!(db.side().await.unwrap(), Side::Both);
    let s: sbworker::ops::status::Status = serde_json::from_str(&db.status_json(10, 60).await.unwrap()).unwrap();
    assert_eq!(s.queues.len(), 2);
    assert!(s.workers.is_empty());
}

/// The roster side's commands, as a user runs them, against the calculation side of a
/// split install: `export`, `recompute` and `explain` refuse it, saying where to go;
/// `sweep` there only ends the dialogs past their LIFETIME (on SQL Server, which ends them
/// itself, it says it has nothing to do).
async fn the_roster_commands_refuse_the_calculation_side(kind: Kind) {
    let url = crate::common::pg::fresh_calc_side_db().await;
    let (connection, _stop) = match kind {
        Kind::Postgres => (url.clone(), None),
        Kind::Tds => {
            let (conn, stop) = emulator_with(&url, Arc::new(Faults::default())).await;
            (conn, Some(stop))
        }
    };
    let mut db =
        Database::connect(&BrokerConfig { kind: kind.broker(), connection: connection.clone() }, None).await.unwrap();
    assert_eq!(db.side().await.unwrap(), Side::Calc);
    // (A process of its own, awaited without blocking: the emulator answering it runs on
    // this test's runtime.)
    let run = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"));
        cmd.args(args).env_remove("SBWORKER__BROKER__CONNECTION").env_remove("SBWORKER_HANDOFF_MSSQL");
        match kind {
            Kind::Postgres => cmd.args(["--postgres", &connection]),
            Kind::Tds => cmd.args(["--mssql", &connection]),
        };
        async move {
            let o = crate::common::within(120, "the command ends", cmd.output()).await.unwrap();
            (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
        }
    };
    for args in [
        &["export", "--periode", "202604"][..],
        &["recompute", "--periode", "202604", "--dry-run"],
        &["explain", "--dienstverband", "1", "--periode", "202604"],
    ] {
        let (ok, said) = run(args).await;
        assert!(!ok && said.contains("is the calculation side of a split install"), "{args:?}: {said}");
        assert!(!said.contains("p;w"), "no secret shown: {said}");
    }
    let (ok, said) = run(&["sweep"]).await;
    let expected = match kind {
        Kind::Postgres => "the calculation side of a split install: 0 dialogs past their LIFETIME ended",
        Kind::Tds => "the calculation side of a split install: nothing to sweep here (SQL Server ends dialogs",
    };
    assert!(ok && said.contains(expected), "{said}");
}

on_every_back_end!(
    a_recompute_shows_its_progress_and_the_keys_are_searched_paged_and_timed,
    a_once_claim_rolled_back_marks_nothing_and_committed_is_never_given_again,
    a_lease_is_confirmed_once_and_an_unknown_batch_confirms_nothing,
    a_sweep_is_skipped_while_another_holds_its_lock_and_stopped_by_its_fuse,
    a_recompute_counts_in_a_dry_run_and_sends_a_named_key,
    every_stored_version_is_read_back_with_its_factors,
    a_dead_letter_is_listed_shown_replayed_once_and_purged,
    the_side_and_the_status_read_alike,
    the_roster_commands_refuse_the_calculation_side,
);

/// A database that cannot be reached: every command that opens one says which (masked)
/// and why (the cause, not only the driver's top line), on both back ends.
#[test]
fn a_database_that_cannot_be_reached_is_named_masked_with_its_cause() {
    let pg = "host=127.0.0.1 port=1 user=u password=s3cretPw dbname=d connect_timeout=5";
    let ms = "Server=tcp:127.0.0.1,1;Database=d;User Id=u;Password=s3cretPw;Encrypt=false";
    for (flag, conn) in [("--postgres", pg), ("--mssql", ms)] {
        for args in
            [&["export", "--periode", "202604"][..], &["sweep"], &["explain", "--dienstverband", "1", "--periode", "1"]]
        {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
                .args(args)
                .args([flag, conn])
                .env_remove("SBWORKER__BROKER__CONNECTION")
                .env_remove("SBWORKER_HANDOFF_MSSQL")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{args:?}: {err}");
            assert!(err.contains("cannot connect to") && err.contains("Connection refused"), "{args:?} {flag}: {err}");
            assert!(!err.contains("s3cretPw") && err.contains("***"), "{args:?} {flag}: {err}");
        }
    }
}
