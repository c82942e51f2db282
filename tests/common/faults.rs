//! The end-state checks and the aimed-fault tools shared by the fault tests: a Vraag of a
//! key of its own, the answer checked against the calculation, a version lock held, the
//! backend that waits on a lock.

use sbworker::broker::postgres::Session;
use sbworker::contract::{Limits, decode_antwoord, encode_vraag, message_types};
use uuid::Uuid;

use super::build::{dienst, maart, w};
use super::calc::{calculation_handler, collect, count, end_all, wait_until};

/// A Vraag for dienstverband `dv` (a key no other test uses), period 7.
pub fn vraag_for(dv: i32) -> Vec<u8> {
    let mut v = maart(vec![dienst("2026-03-10", vec![w("07:00", "15:30")])]);
    v.id = Uuid::new_v4();
    v.dienstverband.id = dv;
    encode_vraag(&v).into_bytes()
}

/// A key of its own for each test.
pub fn fresh_key() -> i32 {
    static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(700_000);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// The answer to `asked` is an Antwoord equal to the calculation of `body`; then the
/// initiator ends its side and the end state is checked.
pub async fn answered_correctly_and_all_clean(s: &mut Session, asked: Uuid, body: &[u8]) {
    let got = collect(s, 1).await;
    assert_eq!(got[0].conversation_handle, asked);
    assert_eq!(got[0].message_type, message_types::ANTWOORD, "{}", String::from_utf8_lossy(&got[0].body));
    let expected = calculation_handler().answer(body).expect("the request is valid");
    let want = decode_antwoord(expected.as_bytes(), &Limits::default()).unwrap();
    let have = decode_antwoord(&got[0].body, &Limits::default()).unwrap();
    assert_eq!(have, want, "the stored answer is the calculation of the request");
    end_all(s, [asked]).await;
    the_end_state_is_clean(s, 0).await;
}

/// Nothing queued, no conversation open, no attempt left, `dead` messages set aside,
/// both queues enabled.
pub async fn the_end_state_is_clean(s: &Session, dead: i64) {
    wait_until("every conversation is closed", || async {
        count(s, "SELECT count(*) FROM sb.endpoint").await == 0
            && count(s, "SELECT count(*) FROM sb.message").await == 0
    })
    .await;
    assert_eq!(count(s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
    assert_eq!(count(s, "SELECT count(*) FROM sbworker.dead_letter").await, dead);
    assert_eq!(count(s, "SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "a queue was disabled");
}

/// Holds the row lock the calculation's version claim of key `dv` needs, in an open
/// transaction of its own (dropping the session releases it).
pub async fn hold_version_lock(url: &str, dv: i32) -> Session {
    let holder = Session::open(url).await.unwrap();
    holder
        .client()
        .execute(
            "INSERT INTO sbworker.answered_version (dienstverband_id, periode_id, versie) VALUES ($1, 7, 0)",
            &[&dv],
        )
        .await
        .unwrap();
    holder.client().batch_execute("BEGIN").await.unwrap();
    holder
        .client()
        .execute(
            "SELECT 1 FROM sbworker.answered_version WHERE dienstverband_id = $1 AND periode_id = 7 FOR UPDATE",
            &[&dv],
        )
        .await
        .unwrap();
    holder
}

/// The backend (not `except`) that waits on a row or transaction lock in this database,
/// once there is one (polled every 20 ms, for at most 60 s). Advisory locks are left
/// out: a receiver about to wait takes one, and can meet a sender's brief try of it.
pub async fn lock_waiter(s: &Session, except: &[i32]) -> i32 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let rows = s
            .client()
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND wait_event <> 'advisory' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        if let Some(p) = rows.iter().map(|r| r.get::<_, i32>(0)).find(|p| !except.contains(p)) {
            return p;
        }
        assert!(tokio::time::Instant::now() < deadline, "no session waits on the lock");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
