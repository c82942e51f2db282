//! The PostgreSQL broker's test world: two queues and a contract between them, and the
//! helpers the broker's tests share (a dialog, an endpoint's state, a waiting receiver).

use std::time::Duration;

use sbworker::broker::Message;
use sbworker::broker::postgres::Session;
use uuid::Uuid;

use super::pg::fresh_db;

pub const VRAAG: &str = "/t/Vraag";
pub const ANTWOORD: &str = "/t/Antwoord";
pub const LEEG: &str = "/t/Leeg";
pub const VRIJ: &str = "/t/Vrij";
pub const NOW: Duration = Duration::ZERO;

/// A database with two queues (iq: initiator, tq: target) and a contract between them.
pub async fn world() -> (String, Session) {
    let url = fresh_db().await;
    let s = Session::open(&url).await.unwrap();
    s.client()
        .batch_execute(
            "SELECT sb.create_message_type('/t/Vraag', 'WELL_FORMED_XML');
             SELECT sb.create_message_type('/t/Antwoord', 'WELL_FORMED_XML');
             SELECT sb.create_message_type('/t/Leeg', 'EMPTY');
             SELECT sb.create_message_type('/t/Vrij', 'NONE');
             SELECT sb.create_contract('/t/C', ARRAY[['/t/Vraag','INITIATOR'],['/t/Antwoord','TARGET'],
                                                     ['/t/Leeg','ANY'],['/t/Vrij','ANY']]);
             SELECT sb.create_queue('iq');
             SELECT sb.create_queue('tq');
             SELECT sb.create_service('/t/I', 'iq');
             SELECT sb.create_service('/t/T', 'tq', ARRAY['/t/C']);",
        )
        .await
        .unwrap();
    (url, s)
}

/// Begins a dialog and sends bodies on it, committed; returns the initiator handle.
pub async fn dialog(s: &mut Session, bodies: &[&str]) -> Uuid {
    s.begin().await.unwrap();
    let h = s.begin_dialog("/t/I", "/t/T", "/t/C", None, None).await.unwrap();
    for b in bodies {
        s.send(h, VRAAG, Some(b.as_bytes())).await.unwrap();
    }
    s.commit().await.unwrap();
    h
}

pub async fn state(s: &Session, handle: Uuid) -> Option<String> {
    s.client().query_opt("SELECT state FROM sb.endpoint WHERE handle = $1", &[&handle]).await.unwrap().map(|r| r.get(0))
}

pub fn bodies(msgs: &[Message]) -> Vec<String> {
    msgs.iter().map(|m| String::from_utf8(m.body.clone()).unwrap()).collect()
}

/// A receive on tq in a transaction of its own, on a task: the bodies it got. A long
/// timeout: were the wake-up lost, it would come back empty.
pub fn waiting_receive(mut s: Session) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        s.begin().await.unwrap();
        let got = s.receive("tq", 10, None, Duration::from_secs(120)).await.unwrap();
        s.commit().await.unwrap();
        bodies(&got)
    })
}

/// Until `n` receivers are marked waiting on a queue (`sb.begin_wait`'s advisory lock,
/// held) and idle in their transaction.
pub async fn until_waiting(watcher: &Session, n: i64) {
    super::calc::wait_until("the receivers wait", || async {
        watcher
            .client()
            .query_one(
                "SELECT count(*) = $1 FROM pg_stat_activity a JOIN pg_locks l USING (pid)
                  WHERE a.state = 'idle in transaction' AND a.query LIKE '%sb.receive%'
                    AND l.locktype = 'advisory' AND l.classid = 1396834305 AND l.granted",
                &[&n],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
}
