//! Lost dialogs on PostgreSQL (the third SQL Server review's C2, and its C4): a request
//! whose dialog is lost (its far side ended WITH CLEANUP before any receive, its LIFETIME
//! over, the broker reset) is found by the sweep and its key answered again; a key whose
//! Vraag cannot be built is recorded with its reason, is not counted as sent, and does
//! not block the others. Each test ends with the end-state check: every key holds the
//! result of its latest roster version, recomputed, and no conversation is left open.

use std::time::Duration;

use sbworker::demo::check::{verify, wait_drained};
use sbworker::demo::roster::Roster;
use sbworker::engine::Tables;
use sbworker::handoff::sweep::{self, Outcome};
use tokio_postgres::Client;

use crate::common::calc::{TempDir, spawn_worker, stop_worker, wait_until};
use crate::common::pg::{busiest_dialog, fresh_roster_db, open_request_of_the_key_of, reused_and_unanswered};

async fn connect(url: &str) -> Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// One sweep run with `opts`: (expired, lost, candidates, sent, repaired).
async fn sweep_with(url: &str, opts: sweep::Options) -> (i64, i64, i64, i64, i64) {
    let mut s = connect(url).await;
    match sweep::run(&mut s, opts).await.unwrap() {
        Outcome::Ran { expired, lost, candidates, sent, repaired, .. } => (expired, lost, candidates, sent, repaired),
        Outcome::Skipped => panic!("nothing else holds the sweep's lock"),
    }
}

/// One sweep run with the default limits.
async fn sweep_once(url: &str) -> (i64, i64, i64, i64, i64) {
    sweep_with(url, sweep::Options::default()).await
}

/// The end state: every key has its latest version's result (recomputed and equal), no
/// request is without an outcome, and no conversation is left.
async fn assert_end_state(c: &Client) {
    wait_drained(c, Duration::from_secs(60), |_| {}).await.unwrap();
    let verdict = verify(c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest, verdict.keys, "{verdict:?}");
    assert_eq!(count(c, "SELECT count(*) FROM rekenserver.berekening_log WHERE uitkomst IS NULL").await, 0);
    wait_until("every conversation ended on both sides", || async {
        count(c, "SELECT count(*) FROM sb.endpoint").await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_lost_by_its_far_side_or_its_lifetime_is_answered_again_after_the_sweep() {
    let (url, c) = fresh_roster_db().await;
    // A lifetime of an hour for the roster's first dialogs (no worker runs yet).
    c.batch_execute("INSERT INTO rekenserver.instelling VALUES ('dialog_lifetime_seconds', 3600)").await.unwrap();
    let mut loader = connect(&url).await;
    Roster::generate(3, 11, false).load(&mut loader).await.unwrap();
    let keys = count(&c, "SELECT count(*) FROM rekenserver.sleutel").await;
    assert!(keys >= 3, "{keys}");
    // Every dialog has the configured lifetime.
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM rekenserver.berekening_log l JOIN sb.endpoint e ON e.handle = l.dialog_handle
              WHERE e.expires_at BETWEEN l.verzonden_op + interval '3590 seconds'
                                     AND l.verzonden_op + interval '3600 seconds'"
        )
        .await,
        keys
    );
    // The repairs get the default lifetime (7 days) again.
    c.batch_execute("DELETE FROM rekenserver.instelling").await.unwrap();
    // The first key's dialog loses its far side before any receive (the Vraag with it).
    c.batch_execute(
        "SELECT sb.end_conversation_cleanup(t.handle)
           FROM (SELECT dialog_handle FROM rekenserver.berekening_log ORDER BY dienstverband_id, periode_id LIMIT 1) l
           JOIN sb.endpoint i ON i.handle = l.dialog_handle
           JOIN sb.endpoint t ON t.conversation_id = i.conversation_id AND NOT t.is_initiator",
    )
    .await
    .unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM sb.endpoint WHERE NOT is_initiator").await, keys - 1);
    // The next sweep finds it (in one database the far side is seen to be gone), not the
    // lifetime: its request is lost (the environment's fault), its initiator endpoint
    // ended, and its key sent again at once (on a dialog of the default lifetime). The
    // others are in flight: nothing else to send.
    assert_eq!(sweep_once(&url).await, (0, 1, 1, 1, 1));
    assert_eq!(count(&c, "SELECT count(*) FROM sb.endpoint WHERE is_initiator").await, keys);
    assert_eq!(
        count(&c, "SELECT count(*) FROM rekenserver.berekening_log WHERE foutmelding LIKE 'lost: the dialog no longer exists%'")
            .await,
        1
    );
    // The hour passes (the clock is not waited for: the dialogs are made older).
    c.batch_execute("UPDATE sb.endpoint SET expires_at = now() - interval '1 second' WHERE is_initiator")
        .await
        .unwrap();
    // The sweep ends them with the broker's error on both sides; the one without a far
    // side hears it from the broker. They are in flight until the collector records it.
    assert_eq!(sweep_once(&url).await, (keys, 0, 0, 0, 0));
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM sb.message m JOIN sb.endpoint e ON e.handle = m.handle
              WHERE e.is_initiator AND m.message_type = 'http://schemas.microsoft.com/SQL/ServiceBroker/Error'"
        )
        .await,
        keys
    );
    let dir = TempDir::new("lost-lifetime");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    wait_until("the collector recorded every expiry as the environment's fault", || async {
        count(
            &c,
            "SELECT count(*) FROM rekenserver.berekening_log
              WHERE uitkomst = 'fout' AND herstelbaar AND foutmelding LIKE 'error -8489: %'",
        )
        .await
            == keys
    })
    .await;
    // Every key is stale, not in flight, and a repair: the next run sends them all.
    assert_eq!(sweep_once(&url).await, (0, 0, keys, keys, keys));
    assert_end_state(&c).await;
    assert_eq!(stop_worker(worker).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_reset_loses_no_key() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(4, 12, false).load(&mut loader).await.unwrap();
    let keys = count(&c, "SELECT count(*) FROM rekenserver.sleutel").await;
    // NEW_BROKER: every conversation removed, no message to either side.
    let removed: i32 = c.query_one("SELECT sb.new_broker()", &[]).await.unwrap().get(0);
    assert_eq!(i64::from(removed), keys);
    assert_eq!(count(&c, "SELECT count(*) FROM sb.message").await, 0);
    // One run marks the cut-off requests lost and sends their keys again.
    assert_eq!(sweep_once(&url).await, (0, keys, keys, keys, keys));
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM rekenserver.berekening_log WHERE uitkomst = 'fout' AND foutmelding LIKE 'lost:%'"
        )
        .await,
        keys
    );
    let dir = TempDir::new("lost-reset");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    assert_end_state(&c).await;
    assert_eq!(stop_worker(worker).await, Some(0));
    // Nothing left for the sweep.
    assert_eq!(sweep_once(&url).await, (0, 0, 0, 0, 0));
}

#[tokio::test]
async fn a_key_whose_vraag_cannot_be_built_is_recorded_and_blocks_no_other() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    // Loaded with sending off (a bulk import): every key waits for the sweep.
    loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(3, 13, false).load(&mut loader).await.unwrap();
    let gone: i32 = c.query_one("SELECT min(id) FROM rooster.dienstverband", &[]).await.unwrap().get(0);
    // The employment removed after its roster rows (the versions of its keys rose).
    loader
        .batch_execute(&format!(
            "DELETE FROM rooster.dienst WHERE dienstverband_id = {gone}; DELETE FROM rooster.dienstverband WHERE id = {gone}"
        ))
        .await
        .unwrap();
    let keys = count(&c, "SELECT count(*) FROM rekenserver.sleutel").await;
    let unbuildable =
        count(&c, &format!("SELECT count(*) FROM rekenserver.sleutel WHERE dienstverband_id = {gone}")).await;
    assert!(unbuildable >= 1 && keys > unbuildable, "{keys} {unbuildable}");
    // The others changed later, so the unbuildable keys head the oldest-first list, and a
    // fuse of their number is all a run takes: the case that blocked every later key.
    let raised: i32 = c
        .query_one(
            "SELECT rekenserver.markeer_sleutels($1 + 1, 2147483647, DATE '2000-01-01', DATE '2100-12-31')",
            &[&gone],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(i64::from(raised), keys - unbuildable);
    let small = sweep::Options { fuse: unbuildable, ..sweep::Options::default() };
    // Its keys are candidates once, never counted as sent, and recorded with the reason;
    // the next run (the same fuse) takes the others.
    assert_eq!(sweep_with(&url, small).await, (0, 0, unbuildable, 0, 0));
    let next = unbuildable.min(keys - unbuildable);
    assert_eq!(sweep_with(&url, small).await, (0, 0, next, next, 0));
    let reasons: Vec<String> =
        c.query("SELECT reden FROM rekenserver.onverzendbaar", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(reasons.len() as i64, unbuildable);
    assert!(reasons.iter().all(|r| r == &format!("dienstverband {gone} does not exist")), "{reasons:?}");
    let fout: String = c
        .query_one("SELECT fout FROM rekenserver.run_log WHERE stap = 'sweep' ORDER BY id DESC LIMIT 1", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!fout.contains("not sent"), "the last run sent every key it took: {fout}");
    let first: String = c
        .query_one("SELECT fout FROM rekenserver.run_log WHERE stap = 'sweep' ORDER BY id LIMIT 1", &[])
        .await
        .unwrap()
        .get(0);
    assert!(first.contains(&format!("{unbuildable} keys not sent")), "{first}");
    // The rest go in the next run; the unbuildable keys are never picked again.
    let rest = keys - unbuildable - next;
    assert_eq!(sweep_once(&url).await, (0, 0, rest, rest, 0));
    assert_eq!(sweep_once(&url).await, (0, 0, 0, 0, 0));
}

/// C8 of the third review: changes the triggers never saw. A TRUNCATE raises every known
/// key's version (its own trigger); a change made with the triggers off is found by
/// `rekenserver.markeer_sleutels` over a range. The sweep sends both, and every key ends
/// on the result of the roster as it now stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_the_roster_triggers_never_saw_are_marked_and_sent_by_the_sweep() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(4, 14, false).load(&mut loader).await.unwrap();
    let dir = TempDir::new("unseen-keys");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    assert_end_state(&c).await;
    let keys = count(&c, "SELECT count(*) FROM rekenserver.sleutel").await;

    // Blocks deleted with the triggers off (as a replication apply or a disabled trigger
    // would): no version rises, nothing is stale, the stored results are now wrong.
    let lo: i32 = c.query_one("SELECT min(id) FROM rooster.dienstverband", &[]).await.unwrap().get(0);
    loader
        .batch_execute(&format!(
            "SET session_replication_role = replica;
             DELETE FROM rooster.tijdblok t USING rooster.dienst d
              WHERE d.id = t.dienst_id AND d.dienstverband_id = {lo} AND t.id % 2 = 0;
             SET session_replication_role = origin;"
        ))
        .await
        .unwrap();
    assert_eq!(sweep_once(&url).await.2, 0, "nothing looks stale");
    // ... yet the stored results no longer follow the roster.
    let wrong = verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(!wrong.problems.is_empty(), "the blocks deleted with the triggers off changed nothing: {wrong:?}");
    let marked: i32 = c
        .query_one("SELECT rekenserver.markeer_sleutels($1, $1, DATE '2000-01-01', DATE '2100-12-31')", &[&lo])
        .await
        .unwrap()
        .get(0);
    let of_lo = count(&c, &format!("SELECT count(*) FROM rekenserver.sleutel WHERE dienstverband_id = {lo}")).await;
    assert_eq!(i64::from(marked), of_lo);
    assert_eq!(sweep_once(&url).await, (0, 0, of_lo, of_lo, 0));
    assert_end_state(&c).await;

    // TRUNCATE fires no DELETE trigger; its own trigger raises every known key.
    loader.batch_execute("TRUNCATE rooster.tijdblok").await.unwrap();
    assert_eq!(sweep_once(&url).await, (0, 0, keys, keys, 0));
    assert_end_state(&c).await;
    assert_eq!(stop_worker(worker).await, Some(0));
}

/// T7 of the third review: an Antwoord is stored only under the key and version its
/// dialog carried; one naming another is refused, and nothing is stored.
#[tokio::test]
async fn an_antwoord_for_another_key_than_its_dialog_carried_is_refused() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(2, 15, false).load(&mut loader).await.unwrap();
    let row = c
        .query_one(
            "SELECT dialog_handle, vraag_id, dienstverband_id, periode_id, versie FROM rekenserver.berekening_log
              ORDER BY dienstverband_id LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (h, id, dv, p, v): (uuid::Uuid, uuid::Uuid, i32, i32, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    let store = |dv: i32, v: i64| {
        let c = &c;
        async move {
            c.query_one(
                "SELECT rekenserver.sla_antwoord_op($1, $2, $3, $4, $5, false, ARRAY[5], ARRAY['100'], ARRAY[1.0])",
                &[&h, &id, &dv, &p, &v],
            )
            .await
        }
    };
    for (wrong_dv, wrong_v) in [(dv + 1000, v), (dv, v + 1)] {
        let e = store(wrong_dv, wrong_v).await.unwrap_err();
        let db = e.as_db_error().expect("a database error");
        assert_eq!(db.code().code(), "22023", "{db:?}");
        assert!(db.message().contains("the dialog carried"), "{}", db.message());
    }
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.resultaat").await, 0);
    // The right key is stored.
    let outcome: String = store(dv, v).await.unwrap().get(0);
    assert_eq!(outcome, "opgeslagen");
}

/// An answer the collector sets aside after its attempts leaves its request with an
/// outcome: the collector's divert records an internal failure (repairable), the answer
/// is kept as a dead letter, and the sweep sends the key again once the fault is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_collector_diverts_is_recorded_and_its_key_sent_again() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    let roster = Roster::generate(2, 16, false);
    let bad: i32 = sbworker::demo::roster::FIRST_ID;
    // Storing the first employee's results fails (the collector's fault, every time).
    c.batch_execute(&format!(
        "CREATE FUNCTION public.weiger() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'the store refuses dienstverband %', NEW.dienstverband_id; END $$;
         CREATE TRIGGER weiger BEFORE INSERT OR UPDATE ON rekenserver.resultaat
             FOR EACH ROW WHEN (NEW.dienstverband_id = {bad}) EXECUTE FUNCTION public.weiger();"
    ))
    .await
    .unwrap();
    roster.load(&mut loader).await.unwrap();
    let keys = count(&c, &format!("SELECT count(*) FROM rekenserver.sleutel WHERE dienstverband_id = {bad}")).await;
    assert!(keys >= 1);
    let dir = TempDir::new("collector-divert");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    wait_until("the collector set the refused answers aside and recorded them", || async {
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = {bad} AND uitkomst = 'fout'
                   AND herstelbaar AND foutmelding LIKE 'internal (50901): diverted after %'"
            ),
        )
        .await
            == keys
    })
    .await;
    assert!(
        count(&c, "SELECT count(*) FROM sbworker.dead_letter WHERE queue = 'loonfactorberekening_data'").await >= keys
    );
    // The fault mended, the sweep repairs the key.
    c.batch_execute("DROP TRIGGER weiger ON rekenserver.resultaat").await.unwrap();
    assert_eq!(sweep_once(&url).await, (0, 0, keys, keys, keys));
    assert_end_state(&c).await;
    assert_eq!(stop_worker(worker).await, Some(0));
}

/// Conversation reuse: a Fout answers the oldest request still open on its dialog; the
/// requests sent after it on the same dialog are lost with it (the calculation ends the
/// dialog with the Fout's error), recorded as the environment's, so the sweep sends their
/// keys again. Without reuse each dialog carries one request, as before.
#[tokio::test]
async fn a_fout_on_a_reused_dialog_answers_its_oldest_open_request_and_the_later_ones_are_lost() {
    // No worker: every request stays open on its key's dialog.
    let (_, c) = reused_and_unanswered().await;
    let (h, n) = busiest_dialog(&c).await;
    assert!(n >= 3, "a key's versions share its dialog: {n}");
    // As the calculation does with a Fout: its side ends the dialog with the error.
    c.execute("SELECT sb.end_conversation(far_handle, 50012, 'ongeldig') FROM sb.endpoint WHERE handle = $1", &[&h])
        .await
        .unwrap();
    c.execute("SELECT rekenserver.noteer_fout($1, 'tijdblok (50012): ongeldig', false, true)", &[&h]).await.unwrap();
    let rows = c
        .query(
            "SELECT uitkomst, herstelbaar, foutmelding FROM rekenserver.berekening_log WHERE dialog_handle = $1
              ORDER BY versie",
            &[&h],
        )
        .await
        .unwrap();
    let got: Vec<(String, bool, String)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(got[0], ("fout".into(), false, "tijdblok (50012): ongeldig".into()), "the oldest gets the Fout");
    for later in &got[1..] {
        assert_eq!((later.0.as_str(), later.1), ("fout", true), "{later:?}");
        assert!(later.2.starts_with("lost: the dialog ended with the Fout of an earlier request"), "{later:?}");
    }
    // The key's current version went again at once, on a new dialog.
    let (to, sent, current) = open_request_of_the_key_of(&c, h).await;
    assert_ne!(to, h);
    assert_eq!(sent, current);
    // An error end without a Fout (no p_eerste) records every open request, as before.
    let other: uuid::Uuid = c
        .query_one("SELECT dialog_handle FROM rekenserver.berekening_log WHERE dialog_handle <> $1 LIMIT 1", &[&h])
        .await
        .unwrap()
        .get(0);
    c.execute("SELECT rekenserver.noteer_fout($1, 'error -8489: over', true)", &[&other]).await.unwrap();
    assert_eq!(
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.berekening_log WHERE dialog_handle = '{other}' AND uitkomst IS NULL"
            )
        )
        .await,
        0
    );
}

/// An unreadable Antwoord on a reused dialog is recorded against its oldest open request
/// while the dialog is still open (the collector ends it just after): the key's current
/// version is sent again on a new dialog, never on the one being ended.
#[tokio::test]
async fn a_request_lost_with_a_reused_dialog_the_collector_ends_is_sent_on_a_new_one() {
    let (_, c) = reused_and_unanswered().await;
    let h: uuid::Uuid = c
        .query_one(
            "SELECT dialog_handle FROM rekenserver.berekening_log GROUP BY dialog_handle HAVING count(*) >= 2
              ORDER BY count(*) DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The dialog is open on both sides (nothing ended it), as when the collector finds an
    // Antwoord it cannot read.
    c.execute("SELECT rekenserver.noteer_fout($1, 'unreadable Antwoord: no', false, true)", &[&h]).await.unwrap();
    let (again, _, _) = open_request_of_the_key_of(&c, h).await;
    assert_ne!(again, h, "sent again on a new dialog");
    assert_eq!(
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.berekening_log WHERE dialog_handle = '{h}' AND uitkomst IS NULL"
            )
        )
        .await,
        0
    );
}

/// A reused dialog's idle timer: `rekenserver.dialoog_stil` keeps the dialog while a
/// request of its key is open on it, and once none is, lets it go (no longer the key's).
#[tokio::test]
async fn an_idle_timer_keeps_a_reused_dialog_while_a_request_is_open_on_it() {
    let (_, c) = reused_and_unanswered().await;
    let h: uuid::Uuid = c
        .query_one("SELECT dialog_handle FROM rekenserver.sleutel WHERE dialog_handle IS NOT NULL LIMIT 1", &[])
        .await
        .unwrap()
        .get(0);
    let stil = "SELECT rekenserver.dialoog_stil($1)";
    assert!(!c.query_one(stil, &[&h]).await.unwrap().get::<_, bool>(0), "a request is open on it");
    assert_eq!(count(&c, &format!("SELECT count(*) FROM rekenserver.sleutel WHERE dialog_handle = '{h}'")).await, 1);
    // No timer while a request is open: its answer sets it (the collector's store).
    let due = format!("SELECT count(*) FROM sb.conversation_timer WHERE handle = '{h}'");
    assert_eq!(count(&c, &due).await, 0, "no timer while a request is open");
    // Every request of it answered (as the collector records them), the last one just
    // now: not idle for the idle time yet, so kept, its timer set again.
    c.execute(
        "UPDATE rekenserver.berekening_log SET uitkomst = 'opgeslagen', beantwoord_op = now() WHERE dialog_handle = $1",
        &[&h],
    )
    .await
    .unwrap();
    assert!(!c.query_one(stil, &[&h]).await.unwrap().get::<_, bool>(0), "answered within the idle time");
    assert_eq!(count(&c, &format!("{due} AND due_at > now() + interval '1 hour' - interval '1 minute'")).await, 1);
    // The last answer longer ago than the idle time: idle.
    c.execute(
        "UPDATE rekenserver.berekening_log SET beantwoord_op = now() - interval '1 day' WHERE dialog_handle = $1",
        &[&h],
    )
    .await
    .unwrap();
    assert!(c.query_one(stil, &[&h]).await.unwrap().get::<_, bool>(0));
    assert_eq!(count(&c, &format!("SELECT count(*) FROM rekenserver.sleutel WHERE dialog_handle = '{h}'")).await, 0);
}

/// An install from before conversation reuse kept the calculation log a row per dialog:
/// installing again makes it a row per request and dialog, with its rows, and again
/// changes nothing.
#[tokio::test]
async fn installing_over_a_log_keyed_by_the_dialog_keys_it_by_request_and_dialog() {
    let (url, c) = fresh_roster_db().await;
    let mut loader = connect(&url).await;
    Roster::generate(2, 15, false).load(&mut loader).await.unwrap();
    c.batch_execute(
        "ALTER TABLE rekenserver.berekening_log DROP CONSTRAINT berekening_log_pkey;
         ALTER TABLE rekenserver.berekening_log ADD PRIMARY KEY (dialog_handle);",
    )
    .await
    .unwrap();
    let key = "SELECT array_length(conkey, 1)::bigint FROM pg_constraint
                WHERE conrelid = 'rekenserver.berekening_log'::regclass AND contype = 'p'";
    assert_eq!(count(&c, key).await, 1);
    let rows = count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await;
    for _ in 0..2 {
        sbworker::broker::postgres::install_with(&url, true).await.unwrap();
        assert_eq!(count(&c, key).await, 2);
        assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, rows);
    }
}

/// N1 of the fourth SQL Server review: a rolling upgrade in the wrong order. The sender
/// is a release ahead of the workers (its Vraags of a later contract version, with an
/// element these workers do not know): the workers answer newer-contract, which the
/// collector records as the environment's fault, not the request's; once the sender and
/// workers agree again (here: the sender put back, as the workers' upgrade would), the
/// sweep sends every such key again and the end state is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vraag_from_a_newer_release_is_answered_again_after_the_upgrade() {
    let (url, c) = fresh_roster_db().await;
    let newer = sbworker::contract::CONTRACT_VERSIE + 1;
    c.batch_execute(&format!(
        "ALTER FUNCTION rekenserver.vraag(int, int, bigint, uuid) RENAME TO vraag_nu;
         CREATE FUNCTION rekenserver.vraag(p_dv int, p_periode int, p_versie bigint, p_id uuid)
         RETURNS xml LANGUAGE sql STABLE AS $$
             SELECT replace(replace(rekenserver.vraag_nu(p_dv, p_periode, p_versie, p_id)::text,
                                    'ContractVersie=\"{v}\"', 'ContractVersie=\"{newer}\"'),
                            '</LoonfactorBerekeningVraag>', '<Toekomst/></LoonfactorBerekeningVraag>')::xml $$;",
        v = sbworker::contract::CONTRACT_VERSIE
    ))
    .await
    .unwrap();
    let mut loader = connect(&url).await;
    Roster::generate(3, 17, false).load(&mut loader).await.unwrap();
    let keys = count(&c, "SELECT count(*) FROM rekenserver.sleutel").await;
    assert!(keys >= 3);
    let dir = TempDir::new("newer-contract");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    let refused = "SELECT count(*) FROM rekenserver.berekening_log
                    WHERE uitkomst = 'fout' AND herstelbaar AND foutmelding LIKE 'newer-contract (%'";
    wait_until("every request is refused as newer-contract", || async { count(&c, refused).await == keys }).await;
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.resultaat").await, 0);
    let said: String =
        c.query_one("SELECT foutmelding FROM rekenserver.berekening_log LIMIT 1", &[]).await.unwrap().get(0);
    assert!(said.contains(&format!("contract version {newer}")), "{said}");
    // The upgrade: sender and workers agree again. The sweep repairs every key.
    c.batch_execute(
        "DROP FUNCTION rekenserver.vraag(int, int, bigint, uuid);
         ALTER FUNCTION rekenserver.vraag_nu(int, int, bigint, uuid) RENAME TO vraag;",
    )
    .await
    .unwrap();
    assert_eq!(sweep_once(&url).await, (0, 0, keys, keys, keys));
    assert_end_state(&c).await;
    assert_eq!(stop_worker(worker).await, Some(0));
}

/// A roster text with a character XML forbids (here U+0001 in a dienstverband's `soort`;
/// `xmlelement` passes control characters through as they are) makes a Vraag that is not
/// well-formed: its SEND refuses it (SB615, the planner's commit fails and nothing is
/// queued), on a new dialog and on a reused one alike. The roster's own Vraag is sent
/// without being parsed again only when its text holds no such character.
#[tokio::test]
async fn a_vraag_with_a_character_xml_forbids_is_refused_at_send_on_either_path() {
    for reuse in [false, true] {
        let (_, c) = if reuse {
            reused_and_unanswered().await
        } else {
            let (_, mut c) = fresh_roster_db().await;
            Roster::generate(2, 15, false).load(&mut c).await.unwrap();
            (String::new(), c)
        };
        let dv: i32 = c.query_one("SELECT min(id) FROM rooster.dienstverband", &[]).await.unwrap().get(0);
        let before = count(&c, "SELECT count(*) FROM sb.message").await;
        let e = c
            .execute("UPDATE rooster.dienstverband SET soort = soort || chr(1) WHERE id = $1", &[&dv])
            .await
            .expect_err("the commit's send refuses the Vraag");
        assert_eq!(e.code().map(|s| s.code()), Some("SB615"), "reuse {reuse}: {e:?}");
        assert_eq!(count(&c, "SELECT count(*) FROM sb.message").await, before, "reuse {reuse}: nothing queued");
        // The same edit without it is sent.
        c.execute("UPDATE rooster.dienstverband SET soort = soort || 'x' WHERE id = $1", &[&dv]).await.unwrap();
        assert!(count(&c, "SELECT count(*) FROM sb.message").await > before, "reuse {reuse}");
    }
}
