//! Races in the PostgreSQL broker, against a real server: a send into a group a
//! receiver holds, a dialog begun as its group's last conversation ends, wake-ups racing
//! a receiver's mark, and the side connection a transport's sessions share.

use std::collections::HashMap;
use std::time::Duration;

use sbworker::broker::postgres::Session;
use sbworker::broker::{ErrorKind, system};
use uuid::Uuid;

use crate::common::broker::{ANTWOORD, NOW, VRAAG, VRIJ, bodies, dialog, state, until_waiting, waiting_receive, world};

/// The wait marks held in this test's database (the cluster is shared by the tests).
const MARKS: &str = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1396834305 \
                     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// A reply sent into a group while a receiver holds that group, committing after the
/// receiver has taken the group's last visible message, must still be received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_into_a_group_a_receiver_holds_is_received_later() {
    let (url, mut s) = world().await;
    // Two dialogs in one initiator group (RELATED_CONVERSATION_GROUP).
    let g = Uuid::from_u128(0x5eed);
    s.begin().await.unwrap();
    let a = s.begin_dialog("/t/I", "/t/T", "/t/C", Some(g), None).await.unwrap();
    s.send(a, VRAAG, Some(b"<a/>")).await.unwrap();
    let b = s.begin_dialog("/t/I", "/t/T", "/t/C", Some(g), None).await.unwrap();
    s.send(b, VRAAG, Some(b"<b/>")).await.unwrap();
    s.commit().await.unwrap();
    let mut target = Session::open(&url).await.unwrap();
    let mut handles = HashMap::new();
    for _ in 0..2 {
        target.begin().await.unwrap();
        let m = target.receive("tq", 10, None, NOW).await.unwrap();
        target.commit().await.unwrap();
        handles.insert(String::from_utf8(m[0].body.clone()).unwrap(), m[0].conversation_handle);
    }
    // The answer on dialog a arrives; a receiver takes it and holds the group.
    target.begin().await.unwrap();
    target.send(handles["<a/>"], ANTWOORD, Some(b"<ra/>")).await.unwrap();
    target.commit().await.unwrap();
    // A receiver holds the group (GET CONVERSATION GROUP: locked, not yet received).
    let mut receiver = Session::open(&url).await.unwrap();
    receiver.begin().await.unwrap();
    assert_eq!(receiver.get_conversation_group("iq", NOW).await.unwrap(), Some(g));
    // Meanwhile the answer on dialog b is sent into the held group.
    let hb = handles["<b/>"];
    let sender_pid: i32 = target.client().query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let (go, gone) = tokio::sync::oneshot::channel::<()>();
    let sender = tokio::spawn(async move {
        target.begin().await.unwrap();
        target.send(hb, ANTWOORD, Some(b"<rb/>")).await.unwrap();
        crate::common::within(60, "the session ends", gone).await.unwrap();
        target.commit().await.unwrap();
    });
    // Until that send has either been written or waits for the receiver's lock.
    let watcher = Session::open(&url).await.unwrap();
    crate::common::calc::wait_until("the send is written or waits for the receiver's lock", || async {
        let (waiting, idle): (bool, bool) = watcher
            .client()
            .query_one(
                "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false), \
                        coalesce(bool_or(state = 'idle in transaction'), false) \
                   FROM pg_stat_activity WHERE pid = $1",
                &[&sender_pid],
            )
            .await
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        waiting || idle
    })
    .await;
    // The receiver takes what it can see (the answer on a) and commits; then the send
    // commits.
    let got = receiver.receive("iq", 10, Some(g), NOW).await.unwrap();
    assert_eq!(bodies(&got), ["<ra/>"]);
    receiver.commit().await.unwrap();
    go.send(()).unwrap();
    crate::common::within(60, "the sender ends", sender).await.unwrap();
    receiver.begin().await.unwrap();
    let got = receiver.receive("iq", 10, None, Duration::from_secs(5)).await.unwrap();
    receiver.commit().await.unwrap();
    assert_eq!(bodies(&got), ["<rb/>"], "the second answer must not be stranded");
}

/// A conversation in initiator group `g` that the target has ended and whose EndDialog
/// the initiator has received: only the initiator's END CONVERSATION is left, and that
/// removes the conversation and, nothing else using it, the group. Returns its handle.
async fn last_conversation_of(s: &mut Session, g: Uuid) -> Uuid {
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", Some(g), None).await.unwrap();
    s.send(h, VRAAG, Some(b"<v/>")).await.unwrap();
    s.commit().await.unwrap();
    ended_by_the_target(s, g).await;
    h
}

/// The target receives the waiting Vraag and ends its side; the initiator receives the
/// EndDialog in group `g`, leaving its own END CONVERSATION to do.
async fn ended_by_the_target(s: &mut Session, g: Uuid) {
    s.begin().await.unwrap();
    let got = s.receive("tq", 10, None, NOW).await.unwrap();
    s.end_conversation(got[0].conversation_handle, None).await.unwrap();
    s.commit().await.unwrap();
    s.begin().await.unwrap();
    let back = s.receive("iq", 10, Some(g), NOW).await.unwrap();
    assert_eq!(back[0].message_type, system::END_DIALOG);
    s.commit().await.unwrap();
}

/// Until the backend `pid` waits for a lock.
async fn until_waiting_for_a_lock(watcher: &Session, pid: i32, what: &str) {
    crate::common::calc::wait_until(what, || async {
        watcher
            .client()
            .query_one(
                "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
}

async fn group_of(s: &Session, handle: Uuid) -> Option<Uuid> {
    s.client()
        .query_opt(
            "SELECT g.id FROM sb.endpoint e JOIN sb.conversation_group g ON g.id = e.group_id WHERE e.handle = $1",
            &[&handle],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

async fn pid(s: &Session) -> i32 {
    s.client().query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_dialog_begun_in_a_group_whose_last_conversation_ends_at_that_moment_keeps_or_remakes_it() {
    let (url, mut s) = world().await;
    let watcher = Session::open(&url).await.unwrap();
    let g = Uuid::from_u128(0x9e7);

    // The dialog begins first and holds the group; the end waits for it, then sees the
    // new conversation and leaves the group.
    let h = last_conversation_of(&mut s, g).await;
    let mut beginner = Session::open(&url).await.unwrap();
    beginner.begin().await.unwrap();
    let new = beginner.begin_dialog("/t/I", "/t/T", "/t/C", Some(g), None).await.unwrap();
    beginner.send(new, VRAAG, Some(b"<v/>")).await.unwrap();
    let mut ender = Session::open(&url).await.unwrap();
    let ender_pid = pid(&ender).await;
    let ending = tokio::spawn(async move {
        ender.begin().await?;
        ender.end_conversation(h, None).await?;
        ender.commit().await
    });
    until_waiting_for_a_lock(&watcher, ender_pid, "the end waits for the dialog that begins").await;
    beginner.commit().await.unwrap();
    ending.await.unwrap().expect("the end goes through");
    assert_eq!(state(&s, h).await, None, "the old conversation is gone");
    assert_eq!(group_of(&s, new).await, Some(g), "the group stays for the new dialog");

    // The end goes first and deletes the group; the dialog waits for it, then makes the
    // group again.
    ended_by_the_target(&mut s, g).await;
    let h = new;
    let mut ender = Session::open(&url).await.unwrap();
    ender.begin().await.unwrap();
    ender.end_conversation(h, None).await.unwrap();
    let mut beginner = Session::open(&url).await.unwrap();
    let beginner_pid = pid(&beginner).await;
    let beginning = tokio::spawn(async move {
        beginner.begin().await?;
        let new = beginner.begin_dialog("/t/I", "/t/T", "/t/C", Some(g), None).await?;
        beginner.send(new, VRAAG, Some(b"<v/>")).await?;
        beginner.commit().await.map(|_| new)
    });
    until_waiting_for_a_lock(&watcher, beginner_pid, "the dialog waits for the end that deletes its group").await;
    ender.commit().await.unwrap();
    let new = beginning.await.unwrap().expect("the dialog begins");
    assert_eq!(state(&s, h).await, None);
    assert_eq!(group_of(&s, new).await, Some(g), "the group is made again");
    let groups: i64 = s
        .client()
        .query_one("SELECT count(*) FROM sb.conversation_group WHERE queue = 'iq'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(groups, 1);
}

/// A connection LISTENing on the channel of queue `queue`; the payloads it is sent.
async fn listening(url: &str, queue: &str) -> (tokio_postgres::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use futures_util::StreamExt;
    let (client, mut conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    let channel: String = client.query_one("SELECT sb.channel($1)", &[&queue]).await.unwrap().get(0);
    client.batch_execute(&format!("LISTEN {channel}")).await.unwrap();
    (client, rx)
}

/// How many wake-ups (a group's id, or empty) the listener got before `tag`, which
/// another session notifies now: notifications arrive in commit order, so whatever the
/// sends committed before notified has arrived by then.
async fn wakeups_before(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    other: &Session,
    queue: &str,
    tag: &str,
) -> usize {
    other.client().execute("SELECT pg_notify(sb.channel($1), $2)", &[&queue, &tag]).await.unwrap();
    let mut wakeups = 0;
    loop {
        match crate::common::within(60, "a notification", rx.recv()).await.expect("the listener is open") {
            p if p == tag => return wakeups,
            _ => wakeups += 1,
        }
    }
}

#[tokio::test]
async fn a_send_notifies_only_while_a_receiver_is_marked_waiting_on_its_queue() {
    let (url, mut s) = world().await;
    let (waiter, mut rx) = listening(&url, "tq").await;
    dialog(&mut s, &["<a/>"]).await;
    assert_eq!(wakeups_before(&mut rx, &s, "tq", "nobody waits").await, 0, "nobody waits: no NOTIFY");

    let no_send_in_flight: bool = waiter.query_one("SELECT sb.begin_wait('tq')", &[]).await.unwrap().get(0);
    assert!(no_send_in_flight);
    dialog(&mut s, &["<b/>"]).await;
    assert_eq!(wakeups_before(&mut rx, &s, "tq", "one waits").await, 1, "a receiver waits: the send notifies");

    let held: bool = waiter.query_one("SELECT sb.end_wait('tq')", &[]).await.unwrap().get(0);
    assert!(held, "the mark was held");
    dialog(&mut s, &["<c/>"]).await;
    assert_eq!(wakeups_before(&mut rx, &s, "tq", "no longer waits").await, 0, "the mark is gone: no NOTIFY");

    // A mark ends with its session.
    waiter.query_one("SELECT sb.begin_wait('tq')", &[]).await.unwrap();
    drop(waiter);
    crate::common::calc::wait_until("the waiter's session ended", || async {
        crate::common::calc::count(&s, MARKS).await == 0
    })
    .await;
    dialog(&mut s, &["<d/>"]).await;
    let (_w, mut rx) = listening(&url, "tq").await;
    assert_eq!(wakeups_before(&mut rx, &s, "tq", "session gone").await, 0);
}

#[tokio::test]
async fn a_send_notifies_once_for_each_group_it_makes_ready_naming_the_group() {
    let (url, mut s) = world().await;
    let (waiter, mut rx) = listening(&url, "tq").await;
    waiter.query_one("SELECT sb.begin_wait('tq')", &[]).await.unwrap();
    // Two dialogs (two groups) in one transaction, two messages on the first.
    s.begin().await.unwrap();
    let a = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    let b = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    for (h, body) in [(a, "<a1/>"), (a, "<a2/>"), (b, "<b/>")] {
        s.send(h, VRAAG, Some(body.as_bytes())).await.unwrap();
    }
    s.commit().await.unwrap();
    s.client().execute("SELECT pg_notify(sb.channel('tq'), 'sent')", &[]).await.unwrap();
    let mut payloads = Vec::new();
    loop {
        match crate::common::within(60, "a notification", rx.recv()).await.expect("the listener is open") {
            p if p == "sent" => break,
            p => payloads.push(p),
        }
    }
    let mut groups: Vec<String> = Vec::new();
    for h in [a, b] {
        let g: Uuid = s
            .client()
            .query_one("SELECT far.group_id FROM sb.endpoint e JOIN sb.endpoint far ON far.conversation_id = e.conversation_id AND far.handle <> e.handle WHERE e.handle = $1", &[&h])
            .await
            .unwrap()
            .get(0);
        groups.push(g.to_string());
    }
    payloads.sort();
    groups.sort();
    assert_eq!(payloads, groups, "one wake-up per target group, naming it");
}

/// Two readers of one worker (one side connection) wait on a queue; one transaction
/// makes two groups ready. Each reader is woken for one (a wake-up per group): were one
/// wake-up to stand for both, the second reader would wait out its 120 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_sharing_a_side_are_woken_one_for_each_group_made_ready() {
    let (url, mut s) = world().await;
    let side = std::sync::Arc::new(sbworker::broker::postgres::Side::open(&url).await.unwrap());
    let first = waiting_receive(Session::open_with(&url, side.clone()).await.unwrap());
    let second = waiting_receive(Session::open_with(&url, side).await.unwrap());
    until_waiting(&s, 2).await;
    s.begin().await.unwrap();
    for body in ["<een/>", "<twee/>"] {
        let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
        s.send(h, VRAAG, Some(body.as_bytes())).await.unwrap();
    }
    s.commit().await.unwrap();
    let mut got = crate::common::within(60, "both readers", async {
        let (a, b) = tokio::join!(first, second);
        [a.unwrap(), b.unwrap()].concat()
    })
    .await;
    got.sort();
    assert_eq!(got, ["<een/>", "<twee/>"]);
}

/// A session of the worker waits for one group of its own; another, sharing its side
/// connection, waits for any group, after it. A message for a third group must wake the
/// second: were the first to take the group's turn, the message would wait out the
/// second's 120 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_waiting_for_its_own_group_takes_no_other_readers_turn() {
    let (url, mut s) = world().await;
    let side = std::sync::Arc::new(sbworker::broker::postgres::Side::open(&url).await.unwrap());
    let mut own = Session::open_with(&url, side.clone()).await.unwrap();
    let own = tokio::spawn(async move {
        own.begin().await.unwrap();
        let got = own.receive("tq", 10, Some(Uuid::from_u128(0x0e1)), Duration::from_secs(120)).await.unwrap();
        own.rollback().await.unwrap();
        got.len()
    });
    until_waiting(&s, 1).await;
    let any = waiting_receive(Session::open_with(&url, side).await.unwrap());
    until_waiting(&s, 2).await;
    dialog(&mut s, &["<derde/>"]).await;
    let got = crate::common::within(60, "the reader of any group", any).await.unwrap();
    assert_eq!(got, ["<derde/>"]);
    own.abort();
}

/// MOVE CONVERSATION into a group makes that group ready when it commits: a receiver
/// waiting meanwhile (it skipped the group the mover held) is woken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_moved_into_a_group_wakes_a_waiting_receiver() {
    let (url, mut s) = world().await;
    let initiator = dialog(&mut s, &["<verhuisd/>"]).await;
    let target: Uuid = s
        .client()
        .query_one(
            "SELECT far.handle FROM sb.endpoint e JOIN sb.endpoint far              ON far.conversation_id = e.conversation_id AND far.handle <> e.handle WHERE e.handle = $1",
            &[&initiator],
        )
        .await
        .unwrap()
        .get(0);
    let mut mover = Session::open(&url).await.unwrap();
    mover.begin().await.unwrap();
    assert!(mover.get_conversation_group("tq", NOW).await.unwrap().is_some(), "the mover holds the group");
    let waiting = waiting_receive(Session::open(&url).await.unwrap());
    until_waiting(&s, 1).await;
    mover.move_conversation(target, Uuid::from_u128(0x6e1e)).await.unwrap();
    mover.commit().await.unwrap();
    let got = crate::common::within(60, "the waiting receiver", waiting).await.unwrap();
    assert_eq!(got, ["<verhuisd/>"]);
}

/// A session whose last wait found its queue idle marks itself before its first look;
/// when that look fails (here: the queue was disabled meanwhile), the mark does not
/// outlive it (every send to the queue would notify while it is held).
#[tokio::test]
async fn a_wait_whose_first_look_fails_leaves_no_mark() {
    let (url, s) = world().await;
    let mut r = Session::open(&url).await.unwrap();
    r.begin().await.unwrap();
    assert!(r.receive("tq", 10, None, Duration::from_millis(20)).await.unwrap().is_empty());
    r.commit().await.unwrap();
    s.client().execute("SELECT sb.alter_queue('tq', p_enabled => false)", &[]).await.unwrap();
    r.begin().await.unwrap();
    let e = r.receive("tq", 10, None, Duration::from_secs(60)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::QueueDisabled, "{e:?}");
    r.rollback().await.unwrap();
    let marks = crate::common::calc::count(&s, MARKS).await;
    assert_eq!(marks, 0, "the failed wait's mark is dropped");
}

/// A wait given up while marked (its future dropped: a client's attention, a timeout)
/// leaves the session marked on that queue; the session's next RECEIVE, on another
/// queue, drops that mark, not one of its own queue's (found by a second read: the mark
/// folded into the RECEIVE dropped the mark of the queue it looked at).
#[tokio::test]
async fn a_mark_left_on_one_queue_is_dropped_by_a_receive_on_another() {
    let (url, s) = world().await;
    let mut r = Session::open(&url).await.unwrap();
    r.begin().await.unwrap();
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), r.receive("tq", 10, None, Duration::from_secs(60))).await;
    assert!(gave_up.is_err(), "the wait was given up while it waited");
    assert_eq!(crate::common::calc::count(&s, MARKS).await, 1, "marked on tq");
    assert!(r.receive("iq", 10, None, NOW).await.unwrap().is_empty());
    assert_eq!(crate::common::calc::count(&s, MARKS).await, 0, "tq's mark dropped by the RECEIVE on iq");
    r.commit().await.unwrap();
}

#[tokio::test]
async fn a_receiver_marking_itself_while_a_send_is_in_flight_is_told_to_look_again() {
    let (url, mut sender) = world().await;
    let (waiter, mut rx) = listening(&url, "tq").await;
    // The send looks for waiters now, finds none, and commits later.
    sender.begin().await.unwrap();
    let h = sender.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    sender.send(h, VRAAG, Some(b"<laat/>")).await.unwrap();
    let no_send_in_flight: bool = waiter.query_one("SELECT sb.begin_wait('tq')", &[]).await.unwrap().get(0);
    assert!(!no_send_in_flight, "a send to the queue is in flight");
    sender.commit().await.unwrap();
    let other = Session::open(&url).await.unwrap();
    assert_eq!(
        wakeups_before(&mut rx, &other, "tq", "committed").await,
        0,
        "the send looked before the mark: this is the wake-up the answer stands in for"
    );
    // Looking again finds the message; with no send in flight, waiting is safe.
    let mut receiver = Session::open(&url).await.unwrap();
    receiver.begin().await.unwrap();
    assert_eq!(bodies(&receiver.receive("tq", 10, None, NOW).await.unwrap()), ["<laat/>"]);
    receiver.commit().await.unwrap();
    let no_send_in_flight: bool = waiter.query_one("SELECT sb.begin_wait('tq')", &[]).await.unwrap().get(0);
    assert!(no_send_in_flight);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_receives_lose_no_wake_up_to_sends_racing_their_mark() {
    // Ping-pong: each message is sent as soon as the previous one was received, so every
    // send races the receiver going back to wait. A lost wake-up would leave a receive
    // waiting out its whole 60 s and coming back empty with a message committed.
    const MESSAGES: usize = 300;
    let (url, mut sender) = world().await;
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<String>>();
    let receiving = tokio::spawn(async move {
        let mut r = Session::open(&url).await.unwrap();
        let mut total = 0;
        while total < MESSAGES {
            r.begin().await.unwrap();
            let got = r.receive("tq", 10, None, Duration::from_secs(60)).await.unwrap();
            r.commit().await.unwrap();
            assert!(!got.is_empty(), "a receive waited out its time with {} of {MESSAGES} received", total);
            total += got.len();
            got_tx.send(bodies(&got)).unwrap();
        }
    });
    let h = dialog(&mut sender, &[]).await;
    let mut received = Vec::new();
    for i in 0..MESSAGES {
        sender.begin().await.unwrap();
        sender.send(h, VRIJ, Some(format!("{i}").as_bytes())).await.unwrap();
        sender.commit().await.unwrap();
        while received.len() <= i {
            received.extend(
                crate::common::within(60, "the receiver gets it", got_rx.recv())
                    .await
                    .expect("the receiver is running"),
            );
        }
    }
    crate::common::within(60, "the receiver ends", receiving).await.unwrap();
    assert_eq!(received, (0..MESSAGES).map(|i| i.to_string()).collect::<Vec<_>>());
}

/// Client backends of the test's database, but for the caller's own.
async fn backends(watcher: &Session) -> Vec<i32> {
    watcher
        .client()
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()
                AND backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transports_sessions_share_one_side_connection_and_get_a_new_one_when_it_breaks() {
    use sbworker::broker::postgres::PostgresTransport;
    use sbworker::transport::{MessageKey, Session as _, Transport};

    let (url, mut sender) = world().await;
    let watcher = Session::open(&url).await.unwrap();
    let before = backends(&watcher).await;
    let transport = PostgresTransport::new(url.clone());
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(transport.open().await.unwrap());
    }
    let mut working = Vec::new();
    for s in &sessions {
        working.push(pid(s).await);
    }
    let new: Vec<i32> = backends(&watcher).await.into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 4, "three sessions, one working connection each and one side in all: {new:?}");
    let side: Vec<i32> = new.iter().copied().filter(|p| !working.contains(p)).collect();
    assert_eq!(side.len(), 1);

    // The counts of one message, written by two sessions through the shared side, add up.
    let key = MessageKey { conversation_handle: Uuid::from_u128(0x51de), sequence: 1 };
    assert_eq!(sessions[0].count_attempts("tq", &[key]).await.unwrap()[0].attempts, 1);
    assert_eq!(sessions[1].count_attempts("tq", &[key]).await.unwrap()[0].attempts, 2);

    // Both waiting sessions hear the wake-ups through the one LISTENing side.
    let waiters: Vec<_> = sessions.drain(..2).map(waiting_receive).collect();
    until_waiting(&watcher, 2).await;
    dialog(&mut sender, &["<een/>"]).await;
    dialog(&mut sender, &["<twee/>"]).await;
    let mut got = Vec::new();
    for w in waiters {
        got.extend(tokio::time::timeout(Duration::from_secs(60), w).await.expect("woken").unwrap());
    }
    got.sort();
    assert_eq!(got, ["<een/>", "<twee/>"]);

    // The side breaks: a session using it fails as a connection failure (the worker
    // drops such a session), and the next session opened gets a new side that works.
    watcher.client().execute("SELECT pg_terminate_backend($1)", &[&side[0]]).await.unwrap();
    let mut old = sessions.pop().unwrap();
    let err = old.count_attempts("tq", &[key]).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Connection, "{err:?}");
    let mut fresh = transport.open().await.unwrap();
    assert_eq!(fresh.count_attempts("tq", &[key]).await.unwrap()[0].attempts, 3);
    let waiter = waiting_receive(fresh);
    until_waiting(&watcher, 1).await;
    dialog(&mut sender, &["<drie/>"]).await;
    assert_eq!(tokio::time::timeout(Duration::from_secs(60), waiter).await.expect("woken").unwrap(), ["<drie/>"]);
}

/// A worker's session (opened by the transport) keeps its bookkeeping with its
/// transaction: the RECEIVE runs inside it (a rollback gives the message back and keeps
/// its count), no wait mark outlives it, the count goes only with a COMMIT, and a delete
/// of the count that fails fails the transaction. (Written for a variant that sent the
/// delete and the mark's drop with the next statement, measured and not kept; it holds
/// for either.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sessions_count_and_mark_end_with_its_transaction() {
    use sbworker::broker::postgres::PostgresTransport;
    use sbworker::transport::{MessageKey, Session as _, Transport};

    let (url, mut sender) = world().await;
    let watcher = Session::open(&url).await.unwrap();
    let mut w = PostgresTransport::new(url.clone()).open().await.unwrap();
    let w_pid = pid(&w).await;
    let counts = "SELECT count(*) FROM sbworker.message_attempt";
    let state = format!("SELECT state FROM pg_stat_activity WHERE pid = {w_pid}");
    let state_of =
        async |watcher: &Session| -> String { watcher.client().query_one(&state, &[]).await.unwrap().get(0) };

    // A transaction that runs nothing leaves nothing open.
    w.begin().await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(state_of(&watcher).await, "idle");

    // An empty wait: it marks itself and waits; no mark is left after the COMMIT.
    w.begin().await.unwrap();
    assert!(w.receive("tq", 10, None, Duration::from_millis(20)).await.unwrap().is_empty());
    assert_eq!(state_of(&watcher).await, "idle in transaction", "the RECEIVE ran inside the transaction");
    w.commit().await.unwrap();
    assert_eq!(crate::common::calc::count(&watcher, MARKS).await, 0, "no mark is left after the COMMIT");
    assert_eq!(state_of(&watcher).await, "idle");

    // Its last wait was idle: the next marks itself before it looks, and finds a
    // message.
    let key = sent_and_taken(&mut sender, &mut w, "<een/>").await;
    w.forget_attempts(&[key]).await.unwrap();
    assert_eq!(crate::common::calc::count(&watcher, counts).await, 1, "the count stays until the COMMIT");
    w.commit().await.unwrap();
    assert_eq!(crate::common::calc::count(&watcher, counts).await, 0, "and the COMMIT deleted it");
    assert_eq!(crate::common::calc::count(&watcher, MARKS).await, 0, "no mark outlives the transaction");
    assert_eq!(crate::common::calc::count(&watcher, "SELECT count(*) FROM sb.message WHERE queue = 'tq'").await, 0);

    // A rollback: the message comes back, its count stays, its delete is undone.
    let key = sent_and_taken(&mut sender, &mut w, "<twee/>").await;
    w.forget_attempts(&[key]).await.unwrap();
    w.rollback().await.unwrap();
    assert_eq!(crate::common::calc::count(&watcher, counts).await, 1, "a rollback keeps the count");
    assert_eq!(crate::common::calc::count(&watcher, MARKS).await, 0);
    w.begin().await.unwrap();
    let again = w.receive("tq", 10, None, Duration::from_secs(60)).await.unwrap();
    assert_eq!(bodies(&again), ["<twee/>"], "the rolled-back RECEIVE gave the message back");
    assert_eq!(w.count_attempts("tq", &[MessageKey::of(&again[0])]).await.unwrap()[0].attempts, 2);
    w.forget_attempts(&[MessageKey::of(&again[0])]).await.unwrap();
    w.commit().await.unwrap();
    assert_eq!(crate::common::calc::count(&watcher, counts).await, 0);

    // The count's delete fails (here: its row is locked past the lock timeout); sent
    // with the COMMIT, the COMMIT must report it (the server would roll back at the
    // COMMIT without an error of its own).
    let key = sent_and_taken(&mut sender, &mut w, "<drie/>").await;
    let holder = Session::open(&url).await.unwrap();
    holder.client().batch_execute("BEGIN").await.unwrap();
    holder
        .client()
        .execute(
            "SELECT 1 FROM sbworker.message_attempt WHERE conversation_handle = $1 FOR UPDATE",
            &[&key.conversation_handle],
        )
        .await
        .unwrap();
    w.client().batch_execute("SET lock_timeout = '50ms'").await.unwrap();
    let e = match w.forget_attempts(&[key]).await {
        Err(e) => e,
        Ok(()) => w.commit().await.expect_err("the failed delete is the COMMIT's failure"),
    };
    assert!(e.message.contains("lock"), "{e:?}");
    w.rollback().await.unwrap();
    // The rollback was counted (poison detection), as when the delete ran alone.
    assert_eq!(
        crate::common::calc::count(
            &watcher,
            "SELECT coalesce(sum(rollbacks), 0)::bigint FROM sb.message WHERE queue = 'tq'"
        )
        .await,
        1
    );
    holder.client().batch_execute("COMMIT").await.unwrap();
    w.client().batch_execute("RESET lock_timeout").await.unwrap();
    w.begin().await.unwrap();
    let again = w.receive("tq", 10, None, Duration::from_secs(60)).await.unwrap();
    assert_eq!(bodies(&again), ["<drie/>"], "the transaction was rolled back: the message is back");
    w.commit().await.unwrap();
}

/// `body` sent on a new dialog, then received by `w` in a transaction it begins and
/// counted once (the transaction is left open); the message's key.
async fn sent_and_taken(sender: &mut Session, w: &mut Session, body: &str) -> sbworker::transport::MessageKey {
    use sbworker::transport::{MessageKey, Session as _};
    dialog(sender, &[body]).await;
    w.begin().await.unwrap();
    let got = w.receive("tq", 10, None, Duration::from_secs(60)).await.unwrap();
    assert_eq!(bodies(&got), [body]);
    let key = MessageKey::of(&got[0]);
    assert_eq!(w.count_attempts("tq", &[key]).await.unwrap()[0].attempts, 1);
    key
}
