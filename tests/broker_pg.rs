//! The PostgreSQL broker's Service Broker semantics, against a real server the tests
//! start themselves (`common::pg`), one test per rule.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sbworker::broker::postgres::{Session, install};
use sbworker::broker::{ErrorKind, system};
use uuid::Uuid;

use crate::common::broker::{
    ANTWOORD, LEEG, NOW, VRAAG, VRIJ, bodies, dialog, state, until_waiting, waiting_receive, world,
};
use crate::common::pg::fresh_db;

#[tokio::test]
async fn install_is_idempotent() {
    let (url, s) = world().await;
    sbworker::broker::postgres::install_with(&url, true).await.unwrap();
    let count = "SELECT (SELECT count(*) FROM sb.message_type) + (SELECT count(*) FROM sb.queue) \
                 + (SELECT count(*) FROM sb.service) + (SELECT count(*) FROM sb.migration) \
                 + (SELECT count(*) FROM pg_proc WHERE pronamespace::regnamespace::text IN ('sb', 'rooster', 'rekenserver')) \
                 + (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal) \
                 + (SELECT count(*) FROM pg_class WHERE relnamespace::regnamespace::text IN ('sb', 'sbworker', 'rooster', 'rekenserver'))";
    // And every function keeps its identity (a function dropped and made again at every
    // install would get a new one, and its callers' plans with it).
    let functions = "SELECT string_agg(oid::regprocedure::text || '=' || oid, ',' ORDER BY oid::regprocedure::text)
                       FROM pg_proc WHERE pronamespace::regnamespace::text IN ('sb', 'sbworker', 'rooster', 'rekenserver')";
    let before: i64 = s.client().query_one(count, &[]).await.unwrap().get(0);
    let before_functions: String = s.client().query_one(functions, &[]).await.unwrap().get(0);
    assert_eq!(install(&url).await.unwrap(), [1, 2, 3, 7, 8, 6]);
    assert_eq!(sbworker::broker::postgres::install_with(&url, true).await.unwrap(), [1, 2, 3, 7, 8, 4, 5, 6]);
    let after: i64 = s.client().query_one(count, &[]).await.unwrap().get(0);
    assert_eq!(before, after);
    let after_functions: String = s.client().query_one(functions, &[]).await.unwrap().get(0);
    assert_eq!(before_functions, after_functions);
}

#[tokio::test]
async fn the_contract_decides_which_side_sends_what() {
    let (_url, mut s) = world().await;
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    let e = s.send(h, ANTWOORD, Some(b"<a/>")).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::ContractViolation, 8432), "{e}");
    s.rollback().await.unwrap();
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    let e = s.send(h, system::DIALOG_TIMER, None).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::ContractViolation, 8431), "{e}");
    s.rollback().await.unwrap();
    // Unknown services and contracts are refused at BEGIN DIALOG.
    s.begin().await.unwrap();
    let e = s.begin_dialog("/t/I", "/t/Nergens", "/t/C", None, None).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    s.rollback().await.unwrap();
    // The target may answer with its own message type.
    dialog(&mut s, &["<v/>"]).await;
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    s.send(got[0].conversation_handle, ANTWOORD, Some(b"<a/>")).await.unwrap();
    let e = s.send(got[0].conversation_handle, VRAAG, Some(b"<v/>")).await.unwrap_err();
    assert_eq!(e.number, 8432);
}

#[tokio::test]
async fn bodies_are_validated_as_the_message_type_says() {
    let (_url, mut s) = world().await;
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    s.client().batch_execute("SAVEPOINT a").await.unwrap();
    let e = s.send(h, VRAAG, Some(b"<niet-gesloten>")).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::Validation, 9615), "{e}");
    s.client().batch_execute("ROLLBACK TO SAVEPOINT a").await.unwrap();
    let e = s.send(h, LEEG, Some(b"x")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Validation);
    s.client().batch_execute("ROLLBACK TO SAVEPOINT a").await.unwrap();
    s.send(h, LEEG, None).await.unwrap();
    s.send(h, VRIJ, Some(b"\xFF\x00 anything")).await.unwrap();
    s.send(h, VRAAG, Some(b"<ok/>")).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    let types: Vec<&str> = got.iter().map(|m| m.message_type.as_str()).collect();
    assert_eq!(types, [LEEG, VRIJ, VRAAG]);
    assert_eq!(got[1].body, b"\xFF\x00 anything");
}

#[tokio::test]
async fn messages_come_in_order_within_a_conversation() {
    let (_url, mut s) = world().await;
    dialog(&mut s, &["<m n='1'/>", "<m n='2'/>", "<m n='3'/>", "<m n='4'/>", "<m n='5'/>"]).await;
    s.begin().await.unwrap();
    let first = s.receive("tq", 2, None, NOW).await.unwrap();
    let rest = s.receive("tq", 10, Some(first[0].conversation_group_id), NOW).await.unwrap();
    s.commit().await.unwrap();
    let all: Vec<String> = bodies(&first).into_iter().chain(bodies(&rest)).collect();
    assert_eq!(all, ["<m n='1'/>", "<m n='2'/>", "<m n='3'/>", "<m n='4'/>", "<m n='5'/>"]);
    let seqs: Vec<i64> = first.iter().chain(&rest).map(|m| m.sequence).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn one_receive_returns_one_group_and_locks_it_until_commit() {
    let (url, mut a) = world().await;
    let mut b = Session::open(&url).await.unwrap();
    dialog(&mut a, &["<eerste/>", "<eerste2/>"]).await;
    dialog(&mut a, &["<tweede/>"]).await;
    a.begin().await.unwrap();
    let got_a = a.receive("tq", 100, None, NOW).await.unwrap();
    assert_eq!(bodies(&got_a), ["<eerste/>", "<eerste2/>"], "only the oldest group");
    let group_a = got_a[0].conversation_group_id;
    // More for A's group while A holds it: B may not have them, and gets the other group.
    let mut c = Session::open(&url).await.unwrap();
    c.begin().await.unwrap();
    let h = c.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    c.send(h, VRAAG, Some(b"<derde/>")).await.unwrap();
    c.commit().await.unwrap();
    b.begin().await.unwrap();
    let got_b = b.receive("tq", 100, None, NOW).await.unwrap();
    assert_eq!(bodies(&got_b), ["<tweede/>"]);
    assert_ne!(got_b[0].conversation_group_id, group_a);
    assert!(b.receive("tq", 100, Some(group_a), NOW).await.unwrap().is_empty(), "A's group is locked");
    b.commit().await.unwrap();
    a.commit().await.unwrap();
    b.begin().await.unwrap();
    assert_eq!(bodies(&b.receive("tq", 100, None, NOW).await.unwrap()), ["<derde/>"]);
    b.commit().await.unwrap();
}

#[tokio::test]
async fn rollback_returns_the_messages() {
    let (_url, mut s) = world().await;
    dialog(&mut s, &["<a/>", "<b/>"]).await;
    s.begin().await.unwrap();
    let first = s.receive("tq", 100, None, NOW).await.unwrap();
    assert!(!s.rollback().await.unwrap());
    s.begin().await.unwrap();
    let again = s.receive("tq", 100, None, NOW).await.unwrap();
    assert_eq!(bodies(&again), bodies(&first));
    assert_eq!(again.iter().map(|m| m.id).collect::<Vec<_>>(), first.iter().map(|m| m.id).collect::<Vec<_>>());
    s.commit().await.unwrap();
}

/// The messages' key: an install from before keyed them by id, with a second index by
/// (group, id). The install makes (group, id) the key and drops the second index, the
/// messages waiting kept; and a worker of a release before, rolling back by ids alone,
/// still counts its rollbacks.
#[tokio::test]
async fn an_install_from_before_is_keyed_by_group_and_id_and_its_messages_kept() {
    let (url, mut s) = world().await;
    dialog(&mut s, &["<a/>", "<b/>"]).await;
    s.client()
        .batch_execute(
            "ALTER TABLE sb.message DROP CONSTRAINT message_pkey, ADD CONSTRAINT message_pkey PRIMARY KEY (id);
             CREATE INDEX message_group ON sb.message (group_id, id);",
        )
        .await
        .unwrap();
    let shape = "SELECT pg_get_constraintdef(c.oid),
                        (SELECT count(*) FROM pg_indexes WHERE schemaname = 'sb' AND tablename = 'message')
                   FROM pg_constraint c WHERE c.conrelid = 'sb.message'::regclass AND c.contype = 'p'";
    let (key, indexes): (String, i64) = s.client().query_one(shape, &[]).await.map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!((key.as_str(), indexes), ("PRIMARY KEY (id)", 2));
    install(&url).await.unwrap();
    let (key, indexes): (String, i64) = s.client().query_one(shape, &[]).await.map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!((key.as_str(), indexes), ("PRIMARY KEY (group_id, id)", 1));
    // By ids alone (a release before's call): counted all the same.
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    assert_eq!(bodies(&got), ["<a/>", "<b/>"]);
    s.client().batch_execute("ROLLBACK").await.unwrap();
    let ids: Vec<i64> = got.iter().map(|m| m.id).collect();
    let disabled: bool = s.client().query_one("SELECT sb.note_rollback($1)", &[&ids]).await.unwrap().get(0);
    assert!(!disabled);
    let rollbacks: Vec<i32> = s
        .client()
        .query("SELECT rollbacks FROM sb.message ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rollbacks, [1, 1]);
    s.begin().await.unwrap();
    assert_eq!(bodies(&s.receive("tq", 10, None, NOW).await.unwrap()), ["<a/>", "<b/>"]);
    s.commit().await.unwrap();
}

#[tokio::test]
async fn a_send_is_invisible_until_commit() {
    let (url, mut sender) = world().await;
    let mut receiver = Session::open(&url).await.unwrap();
    sender.begin().await.unwrap();
    let h = sender.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    sender.send(h, VRAAG, Some(b"<v/>")).await.unwrap();
    receiver.begin().await.unwrap();
    assert!(receiver.receive("tq", 10, None, NOW).await.unwrap().is_empty());
    sender.commit().await.unwrap();
    assert_eq!(bodies(&receiver.receive("tq", 10, None, NOW).await.unwrap()), ["<v/>"]);
    receiver.commit().await.unwrap();
}

#[tokio::test]
async fn end_dialog_and_error_reach_the_far_side_and_endpoints_move_through_their_states() {
    let (_url, mut s) = world().await;
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    assert_eq!(state(&s, h).await.as_deref(), Some("SO"));
    s.send(h, VRAAG, Some(b"<v/>")).await.unwrap();
    s.commit().await.unwrap();
    assert_eq!(state(&s, h).await.as_deref(), Some("CO"));
    let target: Uuid =
        s.client().query_one("SELECT far_handle FROM sb.endpoint WHERE handle = $1", &[&h]).await.unwrap().get(0);
    assert_eq!(state(&s, target).await.as_deref(), Some("SI"));
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    assert_eq!(got[0].conversation_handle, target);
    assert_eq!(state(&s, target).await.as_deref(), Some("CO"));
    s.send(target, ANTWOORD, Some(b"<a/>")).await.unwrap();
    s.end_conversation(target, None).await.unwrap();
    s.commit().await.unwrap();
    assert_eq!((state(&s, target).await.as_deref(), state(&s, h).await.as_deref()), (Some("DO"), Some("DI")));
    s.begin().await.unwrap();
    let back = s.receive("iq", 10, None, NOW).await.unwrap();
    let types: Vec<&str> = back.iter().map(|m| m.message_type.as_str()).collect();
    assert_eq!(types, [ANTWOORD, system::END_DIALOG]);
    s.end_conversation(h, None).await.unwrap();
    s.commit().await.unwrap();
    // Both sides ended: the conversation is cleaned up.
    assert_eq!((state(&s, target).await, state(&s, h).await), (None, None));
    let left: i64 = s.client().query_one("SELECT count(*) FROM sb.conversation_group", &[]).await.unwrap().get(0);
    assert_eq!(left, 0);

    // With an error: the far side gets an Error message with Code and Description.
    let h = dialog(&mut s, &["<v/>"]).await;
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    s.end_conversation(got[0].conversation_handle, Some((50012, "Tijdblok <1>: & kapot"))).await.unwrap();
    s.commit().await.unwrap();
    assert_eq!(state(&s, h).await.as_deref(), Some("ER"));
    s.begin().await.unwrap();
    let back = s.receive("iq", 10, None, NOW).await.unwrap();
    assert_eq!(back[0].message_type, system::ERROR);
    let xml = String::from_utf8(back[0].body.clone()).unwrap();
    assert!(xml.contains("<Code>50012</Code><Description>Tijdblok &lt;1&gt;: &amp; kapot</Description>"), "{xml}");
    s.end_conversation(h, None).await.unwrap();
    s.commit().await.unwrap();
    assert_eq!(state(&s, h).await, None);
    // Ending twice is an error of state; an unknown handle is not found.
    let e = s.end_conversation(h, None).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::ConversationNotFound, 8426));
}

#[tokio::test]
async fn move_conversation_puts_a_dialog_in_another_group() {
    let (_url, mut s) = world().await;
    dialog(&mut s, &["<een/>"]).await;
    dialog(&mut s, &["<twee/>"]).await;
    s.begin().await.unwrap();
    let first = s.receive("tq", 10, None, NOW).await.unwrap();
    let g = first[0].conversation_group_id;
    s.commit().await.unwrap();
    // Move the second dialog's target side into the first one's group.
    let second: Uuid =
        s.client().query_one("SELECT handle FROM sb.message WHERE queue = 'tq'", &[]).await.unwrap().get(0);
    s.begin().await.unwrap();
    s.move_conversation(second, g).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, Some(g), NOW).await.unwrap();
    assert_eq!(bodies(&got), ["<twee/>"]);
    assert_eq!(got[0].conversation_group_id, g);
    s.commit().await.unwrap();
}

#[tokio::test]
async fn five_rolled_back_receives_disable_the_queue_unless_handling_is_off() {
    let (_url, mut s) = world().await;
    dialog(&mut s, &["<gif/>"]).await;
    for attempt in 1..=5 {
        s.begin().await.unwrap();
        assert_eq!(s.receive("tq", 10, None, NOW).await.unwrap().len(), 1);
        assert_eq!(s.rollback().await.unwrap(), attempt == 5, "attempt {attempt}");
    }
    s.begin().await.unwrap();
    let e = s.receive("tq", 10, None, NOW).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::QueueDisabled, 9617));
    s.rollback().await.unwrap();
    let disabled: Vec<String> =
        s.client().query("SELECT queue FROM sb.disabled_queues", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(disabled, ["tq"]);

    // With poison-message handling off the queue stays on, however often it rolls back.
    s.client()
        .batch_execute("SELECT sb.alter_queue('tq', p_enabled => true, p_poison_handling => false)")
        .await
        .unwrap();
    for _ in 0..7 {
        s.begin().await.unwrap();
        assert_eq!(s.receive("tq", 10, None, NOW).await.unwrap().len(), 1);
        assert!(!s.rollback().await.unwrap());
    }
    s.begin().await.unwrap();
    assert_eq!(s.receive("tq", 10, None, NOW).await.unwrap().len(), 1);
    s.commit().await.unwrap();
}

#[tokio::test]
async fn a_waiting_receive_returns_as_soon_as_a_send_commits() {
    let (url, mut sender) = world().await;
    let waiter = waiting_receive(Session::open(&url).await.unwrap());
    // Wait until the receiver has marked itself waiting and looked once more.
    until_waiting(&sender, 1).await;
    dialog(&mut sender, &["<wakker/>"]).await;
    let got = tokio::time::timeout(Duration::from_secs(60), waiter).await.expect("the receive returned").unwrap();
    assert_eq!(got, ["<wakker/>"]);
}

/// A queue set to OFF while a WAITFOR (RECEIVE) waits on it ends that wait with the
/// error at once (the RECEIVE page), not when the wait runs out.
#[tokio::test]
async fn disabling_a_queue_ends_a_waiting_receive_with_its_error() {
    let (url, sender) = world().await;
    let waiter = tokio::spawn(async move {
        let mut s = Session::open(&url).await.unwrap();
        s.begin().await.unwrap();
        s.receive("tq", 10, None, Duration::from_secs(120)).await
    });
    until_waiting(&sender, 1).await;
    sender.client().batch_execute("SELECT sb.alter_queue('tq', p_enabled => false)").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(60), waiter).await.expect("the receive returned").unwrap();
    let e = got.expect_err("a receive on a disabled queue");
    assert_eq!(e.kind, ErrorKind::QueueDisabled, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_sessions_share_a_queue_without_overlap_or_loss() {
    const GROUPS: i64 = 1000;
    const PER_GROUP: i64 = 5;
    let (url, s) = world().await;
    s.client()
        .batch_execute(&format!(
            "DO $$ DECLARE h uuid; BEGIN
               FOR g IN 1..{GROUPS} LOOP
                 h := sb.begin_dialog('/t/I', '/t/T', '/t/C');
                 FOR n IN 1..{PER_GROUP} LOOP
                   PERFORM sb.send(h, '/t/Vrij', convert_to(g || ':' || n, 'UTF8'));
                 END LOOP;
               END LOOP;
             END $$"
        ))
        .await
        .unwrap();
    let held: Arc<Mutex<HashSet<Uuid>>> = Arc::default();
    let seen: Arc<Mutex<HashMap<Uuid, Vec<i64>>>> = Arc::default();
    let total: Arc<Mutex<i64>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (url, held, seen, total) = (url.clone(), held.clone(), seen.clone(), total.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = Session::open(&url).await.unwrap();
            loop {
                s.begin().await.unwrap();
                let got = s.receive("tq", 3, None, Duration::from_millis(200)).await.unwrap();
                if got.is_empty() {
                    s.commit().await.unwrap();
                    if *total.lock().unwrap() == GROUPS * PER_GROUP {
                        return;
                    }
                    continue;
                }
                let g = got[0].conversation_group_id;
                assert!(got.iter().all(|m| m.conversation_group_id == g), "one group per receive");
                assert!(held.lock().unwrap().insert(g), "group {g} held by two sessions at once");
                {
                    let mut seen = seen.lock().unwrap();
                    for m in &got {
                        seen.entry(m.conversation_handle).or_default().push(m.sequence);
                    }
                }
                *total.lock().unwrap() += got.len() as i64;
                // Hold the group across a round trip to the server, as a handler would, so
                // that a second session receiving it meanwhile would find it in `held`.
                s.client().batch_execute("SELECT 1").await.unwrap();
                held.lock().unwrap().remove(&g);
                s.commit().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(300), t).await.expect("drained in time").unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as i64, GROUPS);
    for (h, seqs) in seen.iter() {
        assert_eq!(seqs, &(1..=PER_GROUP).collect::<Vec<_>>(), "conversation {h}: each once, in order");
    }
    assert_eq!(*total.lock().unwrap(), GROUPS * PER_GROUP);
}

#[tokio::test]
async fn sbworker_install_puts_the_broker_in_and_again_changes_nothing() {
    let url = fresh_db().await;
    for _ in 0..2 {
        let out = crate::common::within(
            600,
            "the command ends",
            tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker")).args(["install", "--postgres", &url]).output(),
        )
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("PostgreSQL broker installed"));
    }
    let out = crate::common::within(
        600,
        "the command ends",
        tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
            .args(["install", "--postgres", "host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=2"])
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("installing the PostgreSQL broker"));
}

#[tokio::test]
async fn a_throwaway_cluster_is_gone_once_dropped() {
    let c = sbworker::pg_cluster::Cluster::start(&[]).unwrap();
    let url = c.create_database("probe").await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    let (pid, dir) = c.pid_and_dir();
    let dir = dir.to_owned();
    drop(client);
    drop(c);
    assert!(!dir.exists(), "{} removed", dir.display());
    // SAFETY: signal 0 only asks whether the process exists.
    assert_ne!(unsafe { libc::kill(pid as i32, 0) }, 0, "server {pid} stopped");
}

#[tokio::test]
async fn a_group_left_below_the_search_floor_is_still_served() {
    let (url, mut s) = world().await;
    // A dialog whose send takes a low message id but commits late.
    let mut late = Session::open(&url).await.unwrap();
    late.begin().await.unwrap();
    let h = late.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    late.send(h, VRIJ, Some(b"laat")).await.unwrap();
    // Many later messages, committed first; receiving one raises the floor past it.
    s.client()
        .batch_execute("DO $$ DECLARE h uuid; BEGIN FOR i IN 1..150 LOOP h := sb.begin_dialog('/t/I', '/t/T', '/t/C'); PERFORM sb.send(h, '/t/Vrij', convert_to('vroeg', 'UTF8')); END LOOP; END $$")
        .await
        .unwrap();
    s.begin().await.unwrap();
    assert_eq!(bodies(&s.receive("tq", 1, None, NOW).await.unwrap()), ["vroeg"]);
    s.commit().await.unwrap();
    late.commit().await.unwrap();
    // The late group is found by the periodic search from the start (one in 64),
    // long before the 149 other groups are used up.
    let mut receives = 0;
    loop {
        s.begin().await.unwrap();
        let got = s.receive("tq", 1, None, NOW).await.unwrap();
        s.commit().await.unwrap();
        receives += 1;
        if bodies(&got) == ["laat"] {
            break;
        }
        assert!(receives <= 70, "the late group waited more than 70 receives");
    }
}

#[tokio::test]
async fn an_expired_lifetime_ends_the_dialog_with_an_error_on_both_sides() {
    let (_url, mut s) = world().await;
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, Some(3600)).await.unwrap();
    s.send(h, VRIJ, Some(b"v")).await.unwrap();
    s.commit().await.unwrap();
    let expired: i32 = s.client().query_one("SELECT sb.expire_dialogs()", &[]).await.unwrap().get(0);
    assert_eq!(expired, 0, "not yet expired");
    s.client().execute("UPDATE sb.endpoint SET expires_at = now() - interval '1 second'", &[]).await.unwrap();
    let expired: i32 = s.client().query_one("SELECT sb.expire_dialogs()", &[]).await.unwrap().get(0);
    assert_eq!(expired, 1);
    assert_eq!(state(&s, h).await.as_deref(), Some("ER"));
    // Each side finds an Error -8489, before what was already waiting for it (a dialog's
    // Error comes before its other messages: "Broker System Messages").
    s.begin().await.unwrap();
    let target_side = s.receive("tq", 10, None, NOW).await.unwrap();
    let initiator_side = s.receive("iq", 10, None, NOW).await.unwrap();
    let types: Vec<&str> = target_side.iter().map(|m| m.message_type.as_str()).collect();
    assert_eq!(types, [system::ERROR, VRIJ]);
    assert_eq!(initiator_side[0].message_type, system::ERROR);
    assert!(String::from_utf8_lossy(&initiator_side[0].body).contains("<Code>-8489</Code>"));
    s.end_conversation(target_side[0].conversation_handle, None).await.unwrap();
    s.end_conversation(h, None).await.unwrap();
    s.commit().await.unwrap();
    let left: i64 = s.client().query_one("SELECT count(*) FROM sb.endpoint", &[]).await.unwrap().get(0);
    assert_eq!(left, 0, "both sides ended: cleaned up");
}

#[tokio::test]
async fn get_conversation_group_locks_a_group_and_the_views_show_the_queue() {
    let (url, mut a) = world().await;
    dialog(&mut a, &["<een/>", "<twee/>"]).await;
    let depth =
        a.client().query_one("SELECT messages, groups FROM sb.queue_depth WHERE queue = 'tq'", &[]).await.unwrap();
    assert_eq!((depth.get::<_, i64>(0), depth.get::<_, i64>(1)), (2, 1));
    let states: Vec<(String, i64)> = a
        .client()
        .query("SELECT state, endpoints FROM sb.endpoints_by_state ORDER BY state", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(states, [("CO".to_owned(), 1), ("SI".to_owned(), 1)]);
    a.begin().await.unwrap();
    let g = a.get_conversation_group("tq", NOW).await.unwrap().expect("a group");
    let mut b = Session::open(&url).await.unwrap();
    b.begin().await.unwrap();
    assert_eq!(b.get_conversation_group("tq", NOW).await.unwrap(), None, "the only group is locked by A");
    b.commit().await.unwrap();
    let got = a.receive("tq", 10, Some(g), NOW).await.unwrap();
    assert_eq!(bodies(&got), ["<een/>", "<twee/>"]);
    a.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_surfaces_as_retryable_1205() {
    let (url, mut a) = world().await;
    let mut b = Session::open(&url).await.unwrap();
    let (x, y) = (dialog(&mut a, &[]).await, dialog(&mut a, &[]).await);
    a.begin().await.unwrap();
    b.begin().await.unwrap();
    a.send(x, VRIJ, None).await.unwrap();
    b.send(y, VRIJ, None).await.unwrap();
    // Each now sends on the other's dialog: one of them is the deadlock victim.
    let (ra, rb) = tokio::join!(a.send(y, VRIJ, None), b.send(x, VRIJ, None));
    let victim = match (ra, rb) {
        (Err(e), Ok(())) | (Ok(()), Err(e)) => e,
        other => panic!("expected exactly one deadlock victim, got {other:?}"),
    };
    assert_eq!((victim.kind, victim.number), (ErrorKind::Retryable, 1205), "{victim}");
    assert!(victim.is_retryable() && victim.is_deadlock());
    a.rollback().await.unwrap();
    b.rollback().await.unwrap();
}

fn utf16le(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

fn utf16be(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

#[tokio::test]
async fn xml_bodies_are_validated_in_their_own_encoding_and_kept_byte_for_byte() {
    // As T-SQL clients send them: NVARCHAR is UTF-16LE without a mark, xml UTF-16LE with
    // one; and UTF-16BE with a mark, UTF-8 with a mark, a character outside the BMP.
    let (_url, mut s) = world().await;
    let doc = "<?xml version=\"1.0\" encoding=\"utf-16\"?><Vraag Naam=\"Zoë 😀\">é</Vraag>";
    let mut with_bom = vec![0xFF, 0xFE];
    with_bom.extend(utf16le(doc));
    let mut be_with_bom = vec![0xFE, 0xFF];
    be_with_bom.extend(utf16be("<a>ok</a>"));
    let mut utf8_bom = vec![0xEF, 0xBB, 0xBF];
    utf8_bom.extend(b"<a>ok</a>");
    let good: Vec<Vec<u8>> = vec![utf16le("<Vraag>nvarchar</Vraag>"), with_bom, utf16be("<a/>"), be_with_bom, utf8_bom];
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    for body in &good {
        s.send(h, VRAAG, Some(body)).await.unwrap_or_else(|e| panic!("{body:02x?}: {e}"));
    }
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    s.commit().await.unwrap();
    let received: Vec<Vec<u8>> = got.into_iter().map(|m| m.body).collect();
    assert_eq!(received, good, "kept byte for byte");
    // Malformed XML in any encoding, and what is not UTF-16 at all, is refused (9615).
    let mut odd = utf16le("<a/>");
    odd.push(b'x');
    let mut lone = utf16le("<a>");
    lone.extend([0x00, 0xD8]);
    lone.extend(utf16le("</a>"));
    let mut nul = utf16le("<a>");
    nul.extend([0x00, 0x00]);
    nul.extend(utf16le("</a>"));
    let mut bom_only_open = vec![0xFF, 0xFE];
    bom_only_open.extend(utf16le("<a>"));
    for bad in [utf16le("<niet-gesloten>"), utf16be("<a>"), bom_only_open, odd, lone, nul, vec![0xFF, 0xFE]] {
        s.begin().await.unwrap();
        let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
        let e = s.send(h, VRAAG, Some(&bad)).await.unwrap_err();
        assert_eq!((e.kind, e.number), (ErrorKind::Validation, 9615), "{bad:02x?}: {e}");
        s.rollback().await.unwrap();
    }
}

#[tokio::test]
async fn conversation_priorities_serve_the_higher_level_first_and_the_best_match_decides() {
    let (url, mut s) = world().await;
    s.client()
        .batch_execute(
            "SELECT sb.create_service('/t/Laag', 'iq');
         SELECT sb.create_service('/t/Hoog', 'iq');
         -- The target's side of dialogs from /t/Laag: level 2; from /t/Hoog: level 8.
         SELECT sb.create_broker_priority('laag', '/t/C', '/t/T', '/t/Laag', 2);
         SELECT sb.create_broker_priority('hoog', NULL, '/t/T', '/t/Hoog', 8);
         -- A wider rule loses to the named contract of 'laag' (the contract comes first).
         SELECT sb.create_broker_priority('breed', NULL, '/t/T', '/t/Laag', 9);",
        )
        .await
        .unwrap();
    let send = async |s: &mut Session, from: &str, body: &str| {
        s.begin().await.unwrap();
        let h = s.begin_dialog(from, "/t/T", "/t/C", None, None).await.unwrap();
        s.send(h, VRAAG, Some(body.as_bytes())).await.unwrap();
        s.commit().await.unwrap();
    };
    // Oldest first: two low, one default, one high.
    send(&mut s, "/t/Laag", "<laag1/>").await;
    send(&mut s, "/t/I", "<gewoon/>").await;
    send(&mut s, "/t/Laag", "<laag2/>").await;
    send(&mut s, "/t/Hoog", "<hoog/>").await;
    let levels: Vec<(String, i16)> = s
        .client()
        .query("SELECT far_service, priority FROM sb.endpoint WHERE NOT is_initiator ORDER BY created_at, handle", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(levels.contains(&("/t/Laag".into(), 2)) && levels.contains(&("/t/Hoog".into(), 8)), "{levels:?}");
    assert!(levels.contains(&("/t/I".into(), 5)), "{levels:?}");
    let mut order = Vec::new();
    for _ in 0..4 {
        s.begin().await.unwrap();
        order.extend(bodies(&s.receive("tq", 10, None, NOW).await.unwrap()));
        s.commit().await.unwrap();
    }
    assert_eq!(order, ["<hoog/>", "<gewoon/>", "<laag1/>", "<laag2/>"]);
    // A high-level group locked by another receiver: the next level is served meanwhile.
    send(&mut s, "/t/Hoog", "<hoog/>").await;
    send(&mut s, "/t/Laag", "<laag/>").await;
    let mut other = Session::open(&url).await.unwrap();
    other.begin().await.unwrap();
    assert_eq!(bodies(&other.receive("tq", 10, None, NOW).await.unwrap()), ["<hoog/>"]);
    s.begin().await.unwrap();
    assert_eq!(bodies(&s.receive("tq", 10, None, NOW).await.unwrap()), ["<laag/>"]);
    s.commit().await.unwrap();
    other.commit().await.unwrap();
}

#[tokio::test]
async fn a_group_keeps_the_level_of_the_messages_it_still_holds() {
    let (_url, mut s) = world().await;
    s.client()
        .batch_execute(
            "SELECT sb.create_service('/t/Laag', 'iq');
             SELECT sb.create_broker_priority('laag', NULL, '/t/T', '/t/Laag', 2);",
        )
        .await
        .unwrap();
    // A default-level dialog of two messages, then a low one.
    dialog(&mut s, &["<een/>", "<twee/>"]).await;
    s.begin().await.unwrap();
    let low = s.begin_dialog("/t/Laag", "/t/T", "/t/C", None, None).await.unwrap();
    s.send(low, VRAAG, Some(b"<laag/>")).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    let first = s.receive("tq", 1, None, NOW).await.unwrap();
    assert_eq!(bodies(&first), ["<een/>"]);
    let g = first[0].conversation_group_id;
    s.commit().await.unwrap();
    assert_eq!(group_level(&s, g).await, 5);
    // The low dialog moved into the default group: the group holds a level-5 message
    // and a level-2 one, and is at level 5.
    let low_target: Uuid =
        s.client().query_one("SELECT handle FROM sb.message WHERE body = '<laag/>'", &[]).await.unwrap().get(0);
    s.begin().await.unwrap();
    s.move_conversation(low_target, g).await.unwrap();
    s.commit().await.unwrap();
    assert_eq!(group_level(&s, g).await, 5);
    s.begin().await.unwrap();
    assert_eq!(bodies(&s.receive("tq", 1, Some(g), NOW).await.unwrap()), ["<twee/>"]);
    s.commit().await.unwrap();
    // What is left there is the low message alone: its level now.
    assert_eq!(group_level(&s, g).await, 2);
}

async fn group_level(s: &Session, g: Uuid) -> i16 {
    s.client().query_one("SELECT priority FROM sb.group_ready WHERE group_id = $1", &[&g]).await.unwrap().get(0)
}

/// A SEND locks its own side of the conversation only ("Conversation group locks": a
/// lock the target holds does not block the initiator): the initiator sends while the
/// target's transaction, which sent on the same conversation, is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_does_not_wait_for_the_far_sides_open_send() {
    let (url, mut a) = world().await;
    let mut b = Session::open(&url).await.unwrap();
    let (h, target) = conversing(&mut a, &mut b).await;
    // The target answers and keeps its transaction open.
    b.begin().await.unwrap();
    b.send(target, ANTWOORD, Some(b"<a/>")).await.unwrap();
    a.begin().await.unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(30), a.send(h, VRAAG, Some(b"<v2/>"))).await;
    sent.expect("the initiator's SEND waited for the target's transaction").unwrap();
    a.commit().await.unwrap();
    b.commit().await.unwrap();
    a.begin().await.unwrap();
    assert_eq!(bodies(&a.receive("iq", 10, None, NOW).await.unwrap()), ["<a/>"]);
    assert_eq!(bodies(&a.receive("tq", 10, None, NOW).await.unwrap()), ["<v2/>"]);
    a.commit().await.unwrap();
}

/// An END of the far side waits for a SEND in flight on the conversation (so it never
/// ends under a message being put in its queue), then discards that message with the
/// rest of what it had not received, and the sender hears of the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_waits_for_the_far_sides_send_in_flight_and_discards_its_message() {
    let (url, mut a) = world().await;
    let mut b = Session::open(&url).await.unwrap();
    let watcher = Session::open(&url).await.unwrap();
    let (h, target) = conversing(&mut a, &mut b).await;
    a.begin().await.unwrap();
    a.send(h, VRAAG, Some(b"<v2/>")).await.unwrap();
    let ending = tokio::spawn(async move {
        b.begin().await.unwrap();
        b.end_conversation(target, None).await.unwrap();
        b.commit().await.unwrap();
        b
    });
    // The END waits on a row lock the sender holds.
    waits_on_a_lock(&watcher, "end_conversation").await;
    a.commit().await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(30), ending).await.expect("the END finished").unwrap();
    assert_eq!(state(&b, target).await.as_deref(), Some("DO"));
    let left: i64 =
        b.client().query_one("SELECT count(*) FROM sb.message WHERE handle = $1", &[&target]).await.unwrap().get(0);
    assert_eq!(left, 0, "the message sent before the end was discarded with the conversation");
    a.begin().await.unwrap();
    let back = a.receive("iq", 10, None, NOW).await.unwrap();
    assert_eq!(back.iter().map(|m| m.message_type.as_str()).collect::<Vec<_>>(), [system::END_DIALOG]);
    a.commit().await.unwrap();
}

/// A MOVE CONVERSATION of the far side waits for a SEND in flight on the conversation
/// (the sender holds the far endpoint against a move: the move locks only its own
/// endpoint), so the message lands in the group the conversation moved to, not the one
/// it left. Without the sender's lock on the far endpoint the move would not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_of_the_far_side_waits_for_a_send_in_flight() {
    let (url, mut a) = world().await;
    let mut b = Session::open(&url).await.unwrap();
    let watcher = Session::open(&url).await.unwrap();
    let h = dialog(&mut a, &["<v/>"]).await;
    dialog(&mut a, &["<ander/>"]).await;
    // Both first messages received (each RECEIVE takes one group): the groups by handle.
    let mut groups = HashMap::new();
    for _ in 0..2 {
        b.begin().await.unwrap();
        for m in b.receive("tq", 10, None, NOW).await.unwrap() {
            groups.insert(m.conversation_handle, m.conversation_group_id);
        }
        b.commit().await.unwrap();
    }
    // The other dialog's group on the target side is where h's target side moves to.
    let target: Uuid =
        b.client().query_one("SELECT far_handle FROM sb.endpoint WHERE handle = $1", &[&h]).await.unwrap().get(0);
    let to = *groups.iter().find(|(handle, _)| **handle != target).expect("the other dialog's group").1;
    a.begin().await.unwrap();
    a.send(h, VRAAG, Some(b"<v2/>")).await.unwrap();
    let moving = tokio::spawn(async move {
        b.begin().await.unwrap();
        b.move_conversation(target, to).await.unwrap();
        b.commit().await.unwrap();
        b
    });
    waits_on_a_lock(&watcher, "move_conversation").await;
    a.commit().await.unwrap();
    let mut b = tokio::time::timeout(Duration::from_secs(30), moving).await.expect("the MOVE finished").unwrap();
    b.begin().await.unwrap();
    let got = b.receive("tq", 10, Some(to), NOW).await.unwrap();
    assert_eq!(bodies(&got), ["<v2/>"]);
    assert!(got.iter().all(|m| m.conversation_group_id == to), "{got:?}");
    b.commit().await.unwrap();
}

/// A dialog begun by `a` whose first message `b` has received: (initiator, target).
async fn conversing(a: &mut Session, b: &mut Session) -> (Uuid, Uuid) {
    let h = dialog(a, &["<v/>"]).await;
    b.begin().await.unwrap();
    let target = b.receive("tq", 10, None, NOW).await.unwrap()[0].conversation_handle;
    b.commit().await.unwrap();
    (h, target)
}

/// Waits until a session of this test's database waits on a lock in a statement that
/// contains `what`.
async fn waits_on_a_lock(watcher: &Session, what: &str) {
    let pattern = format!("%{what}%");
    crate::common::calc::wait_until("a session waits on a lock", || async {
        watcher
            .client()
            .query_one(
                "SELECT count(*) = 1 FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
}

/// The target side's handle of a dialog begun at `h`.
async fn far_side(s: &Session, h: Uuid) -> Uuid {
    s.client().query_one("SELECT far_handle FROM sb.endpoint WHERE handle = $1", &[&h]).await.unwrap().get(0)
}

async fn timer_set(s: &Session, h: Uuid) -> bool {
    s.client()
        .query_one("SELECT EXISTS (SELECT 1 FROM sb.conversation_timer WHERE handle = $1)", &[&h])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_conversation_timer_puts_a_dialog_timer_on_its_own_side_before_the_dialogs_other_messages() {
    let (_url, mut s) = world().await;
    let h = dialog(&mut s, &["<v1/>", "<v2/>"]).await;
    let target = far_side(&s, h).await;
    // An hour away: nothing arrives.
    s.begin().await.unwrap();
    s.begin_conversation_timer(h, 3600).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    assert!(s.receive("iq", 10, None, NOW).await.unwrap().is_empty());
    s.commit().await.unwrap();
    assert!(timer_set(&s, h).await);
    // A new call sets the new timeout (0: due at once), and each side has its own timer.
    s.begin().await.unwrap();
    s.begin_conversation_timer(h, 0).await.unwrap();
    s.begin_conversation_timer(target, 0).await.unwrap();
    s.commit().await.unwrap();
    // On the target's queue: the timer first, then the dialog's messages in order.
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    s.commit().await.unwrap();
    let kinds: Vec<(&str, i64)> = got.iter().map(|m| (m.message_type.as_str(), m.sequence)).collect();
    assert_eq!(kinds, [(system::DIALOG_TIMER, 0), (VRAAG, 1), (VRAAG, 2)]);
    assert!(got.iter().all(|m| m.conversation_handle == target));
    assert!(got[0].body.is_empty(), "a DialogTimer message is empty");
    // On the initiator's queue: its own, once.
    s.begin().await.unwrap();
    let back = s.receive("iq", 10, None, NOW).await.unwrap();
    s.commit().await.unwrap();
    assert_eq!(
        back.iter().map(|m| (m.message_type.as_str(), m.conversation_handle)).collect::<Vec<_>>(),
        [(system::DIALOG_TIMER, h)]
    );
    s.begin().await.unwrap();
    assert!(s.receive("iq", 10, None, NOW).await.unwrap().is_empty(), "fired once");
    assert!(s.receive("tq", 10, None, NOW).await.unwrap().is_empty(), "fired once");
    s.commit().await.unwrap();
    assert!(!timer_set(&s, h).await && !timer_set(&s, target).await);
    // The dialog goes on as before.
    s.begin().await.unwrap();
    s.send(target, ANTWOORD, Some(b"<a/>")).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    assert_eq!(bodies(&s.receive("iq", 10, None, NOW).await.unwrap()), ["<a/>"]);
    s.commit().await.unwrap();
}

/// A dialog's Error comes before its other messages, whatever order they were sent in,
/// and after its DialogTimer; the other messages can still be received after it ("Broker
/// System Messages"). Both in one batch and one message at a time.
#[tokio::test]
async fn a_dialogs_error_is_received_after_its_timer_and_before_its_other_messages() {
    let (_url, mut s) = world().await;
    for max in [10, 1] {
        let h = dialog(&mut s, &["<v/>"]).await;
        let target = far_side(&s, h).await;
        s.begin().await.unwrap();
        assert_eq!(s.receive("tq", 10, None, NOW).await.unwrap().len(), 1);
        s.send(target, ANTWOORD, Some(b"<a1/>")).await.unwrap();
        s.send(target, ANTWOORD, Some(b"<a2/>")).await.unwrap();
        s.end_conversation(target, Some((4711, "the second failed"))).await.unwrap();
        s.commit().await.unwrap();
        s.begin().await.unwrap();
        s.begin_conversation_timer(h, 0).await.unwrap();
        s.commit().await.unwrap();
        let mut got = Vec::new();
        loop {
            s.begin().await.unwrap();
            let batch = s.receive("iq", max, None, NOW).await.unwrap();
            s.commit().await.unwrap();
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= max as usize);
            got.extend(batch);
        }
        let kinds: Vec<(&str, i64)> = got.iter().map(|m| (m.message_type.as_str(), m.sequence)).collect();
        assert_eq!(
            kinds,
            [(system::DIALOG_TIMER, 0), (system::ERROR, 3), (ANTWOORD, 1), (ANTWOORD, 2)],
            "receiving at most {max} at a time"
        );
        assert!(got.iter().all(|m| m.conversation_handle == h));
        s.begin().await.unwrap();
        s.end_conversation(h, None).await.unwrap();
        s.commit().await.unwrap();
    }
}

#[tokio::test]
async fn a_conversation_timer_needs_an_open_side_and_a_timeout_of_zero_or_more_and_dies_with_its_side() {
    let (_url, mut s) = world().await;
    s.begin().await.unwrap();
    let e = s.begin_conversation_timer(Uuid::new_v4(), 10).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::ConversationNotFound, 8426), "{e}");
    s.rollback().await.unwrap();
    let h = dialog(&mut s, &["<v/>"]).await;
    s.begin().await.unwrap();
    let e = s.begin_conversation_timer(h, -1).await.unwrap_err();
    assert!(e.message.contains("must be 0 or more"), "{e}");
    s.rollback().await.unwrap();
    // A timer due, then its side ends in the same transaction: nothing arrives, and the
    // timer is dropped at the next look.
    let target = far_side(&s, h).await;
    s.begin().await.unwrap();
    assert_eq!(bodies(&s.receive("tq", 10, None, NOW).await.unwrap()), ["<v/>"]);
    s.begin_conversation_timer(target, 0).await.unwrap();
    s.end_conversation(target, None).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    assert!(s.receive("tq", 10, None, NOW).await.unwrap().is_empty());
    s.commit().await.unwrap();
    assert!(!timer_set(&s, target).await);
    // An ended side takes no timer.
    s.begin().await.unwrap();
    let e = s.begin_conversation_timer(target, 10).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::InvalidState, 8429), "{e}");
    s.rollback().await.unwrap();
}

#[tokio::test]
async fn a_due_timer_of_a_group_another_receiver_holds_never_makes_a_receive_wait() {
    let (url, mut a) = world().await;
    let mut b = Session::open(&url).await.unwrap();
    let h = dialog(&mut a, &["<x/>"]).await;
    let target = far_side(&a, h).await;
    a.begin().await.unwrap();
    a.receive("tq", 10, None, NOW).await.unwrap();
    a.commit().await.unwrap();
    // A holds the target's group, received to its last message (its ready row deleted,
    // not yet committed); B sets the target's timer due now, and receives.
    a.begin().await.unwrap();
    a.send(h, VRAAG, Some(b"<y/>")).await.unwrap();
    a.commit().await.unwrap();
    a.begin().await.unwrap();
    assert_eq!(bodies(&a.receive("tq", 10, None, NOW).await.unwrap()), ["<y/>"]);
    b.begin().await.unwrap();
    b.begin_conversation_timer(target, 0).await.unwrap();
    b.commit().await.unwrap();
    b.begin().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), b.receive("tq", 10, None, NOW))
        .await
        .expect("the receive waited for the group A holds")
        .unwrap();
    assert!(got.is_empty());
    b.commit().await.unwrap();
    assert!(timer_set(&b, target).await, "left for the next look");
    a.commit().await.unwrap();
    // A let go: the next look delivers it.
    b.begin().await.unwrap();
    let got = b.receive("tq", 10, None, NOW).await.unwrap();
    b.commit().await.unwrap();
    assert_eq!(
        got.iter().map(|m| (m.message_type.as_str(), m.conversation_handle)).collect::<Vec<_>>(),
        [(system::DIALOG_TIMER, target)]
    );
}

async fn ready_to_send(s: &Session, h: Uuid) -> bool {
    s.client().query_one("SELECT sb.ready_to_send($1)", &[&h]).await.unwrap().get(0)
}

/// A sender that reuses a dialog asks `sb.ready_to_send` first: false, at once, while a
/// receiver holds the other side's group (a SEND into it would wait for that receiver's
/// transaction) or either side has ended; true otherwise, holding the group's ready row
/// until its commit.
#[tokio::test]
async fn ready_to_send_never_waits_for_the_other_sides_receiver() {
    let (url, mut a) = world().await;
    let b = Session::open(&url).await.unwrap();
    let h = dialog(&mut a, &["<x/>", "<y/>"]).await;
    // The target's receiver holds its group, with a message left in it.
    a.begin().await.unwrap();
    assert_eq!(bodies(&a.receive("tq", 1, None, NOW).await.unwrap()), ["<x/>"]);
    b.client().batch_execute("BEGIN").await.unwrap();
    let held = tokio::time::timeout(Duration::from_secs(30), ready_to_send(&b, h)).await.expect("it waited");
    assert!(!held, "the group is held");
    b.client().batch_execute("ROLLBACK").await.unwrap();
    // Received to its last message (the ready row deleted, not committed): still held.
    assert_eq!(bodies(&a.receive("tq", 10, None, NOW).await.unwrap()), ["<y/>"]);
    b.client().batch_execute("BEGIN").await.unwrap();
    assert!(!tokio::time::timeout(Duration::from_secs(30), ready_to_send(&b, h)).await.expect("it waited"));
    b.client().batch_execute("ROLLBACK").await.unwrap();
    a.commit().await.unwrap();
    // Free: true, and the group stays with the sender until it commits.
    b.client().batch_execute("BEGIN").await.unwrap();
    assert!(ready_to_send(&b, h).await);
    b.client().query_one("SELECT sb.send($1, $2, $3)", &[&h, &VRAAG, &b"<z/>".as_slice()]).await.unwrap();
    a.begin().await.unwrap();
    assert!(a.receive("tq", 10, None, NOW).await.unwrap().is_empty(), "the sender holds the group");
    a.commit().await.unwrap();
    b.client().batch_execute("COMMIT").await.unwrap();
    a.begin().await.unwrap();
    assert_eq!(bodies(&a.receive("tq", 10, None, NOW).await.unwrap()), ["<z/>"]);
    // The other side ended: false.
    let target = far_side(&a, h).await;
    a.end_conversation(target, None).await.unwrap();
    a.commit().await.unwrap();
    assert!(!ready_to_send(&b, h).await);
}
