//! The side connection a session (or every session of a transport) shares: it LISTENs
//! for wake-ups and writes what must outlive a rollback.

use super::{BrokerError, Client, Endpoint, ErrorKind, HashMap, Named, S, Statement, connect, error_of, watch};
use std::sync::Arc;
use tokio::sync::Notify;

/// The statements that run on the side connection, prepared when it opens.
pub(super) const SIDE_STATEMENTS: [Named; 3] = [S::COUNT_ATTEMPTS, S::NOTE_FAILURE, S::QUEUE_STATE];

/// The wake-ups of the queues a side LISTENs for, one [`Notify`] per queue. A
/// notification that names a conversation group (a send, a timer: `sb.wake_group`) wakes
/// one waiting session of its queue (or is kept for the next that waits), so that one
/// message does not cost every waiting reader of the worker a RECEIVE; several groups
/// made ready in one transaction notify once each. A notification without a group (a
/// rollback giving messages back, a group with messages left, a queue enabled) wakes
/// every session waiting on its queue.
///
/// A session waiting for one group or conversation (`WHERE conversation_group_id = g`)
/// cannot take another group's message, so it is woken by every notification of its
/// queue instead of taking a turn.
#[derive(Default)]
pub(super) struct Wakeups {
    by_channel: std::sync::Mutex<HashMap<String, Arc<Waiters>>>,
}

/// One queue's waiting sessions: those that take any group, one woken per group, and
/// those that wait for a group of their own, all woken each time.
#[derive(Default)]
pub(super) struct Waiters {
    pub(super) any: Notify,
    pub(super) restricted: Notify,
}

impl Wakeups {
    /// The channel's waiters, made on first use (before its LISTEN, so that no
    /// notification finds no one to hand it to).
    pub(super) fn of(&self, channel: &str) -> Arc<Waiters> {
        self.by_channel.lock().expect("not poisoned").entry(channel.to_owned()).or_default().clone()
    }

    /// Hands a notification to the waiters of its channel.
    pub(super) fn deliver(&self, channel: &str, payload: &str) {
        let Some(w) = self.by_channel.lock().expect("not poisoned").get(channel).cloned() else {
            return;
        };
        if payload.is_empty() {
            w.any.notify_waiters();
        } else {
            w.any.notify_one();
        }
        w.restricted.notify_waiters();
    }
}

/// The side connection: never in a transaction, it LISTENs for the queues' wake-ups and
/// writes what must outlive a rollback (attempt counts, failure notes). One side serves
/// one session ([`Session::open`](super::Session::open)) or every session of a [`PostgresTransport`](super::PostgresTransport), whose
/// readers then cost one connection each plus one in all. tokio-postgres pipelines the
/// queries of sessions sharing it on the one connection; none of them waits for a lock
/// a session's open transaction holds (a message's count is written only by the
/// transaction that received it, and while no transaction holds the message).
pub struct Side {
    pub(super) client: Client,
    pub(super) wakeups: Arc<Wakeups>,
    /// Changes never; ends (an error to `changed`) when the connection's task ends.
    pub(super) alive: watch::Receiver<()>,
    /// The queues LISTENed for, and their waiters (LISTEN twice is harmless: two
    /// sessions may race here).
    pub(super) listening: std::sync::Mutex<HashMap<String, Arc<Waiters>>>,
    pub(super) statements: HashMap<&'static str, Statement>,
    /// Set when a query on it failed for its connection: it is not handed out again.
    pub(super) broken: std::sync::atomic::AtomicBool,
}

impl Side {
    /// Connects the side connection to `url` and prepares its statements.
    pub async fn open(url: &str) -> Result<Self, BrokerError> {
        Self::open_at(&super::endpoint(url)?).await
    }

    /// [`Side::open`] on a resolved endpoint.
    pub async fn open_at(at: &Endpoint) -> Result<Self, BrokerError> {
        let wakeups = Arc::new(Wakeups::default());
        let (tx, alive) = watch::channel(());
        let client = connect(at, Some((wakeups.clone(), tx))).await?;
        // What the side writes (attempt counts, failure notes) commits without
        // waiting for the WAL flush: such a commit survives a crash of the worker (the
        // server writes it out within wal_writer_delay), and the receiving transaction's
        // own synchronous commit flushes it first. Only a crash of PostgreSQL itself can
        // lose a count, of an attempt whose transaction it rolled back too. One flush per
        // message instead of two.
        client.batch_execute(S::SIDE_ASYNC_COMMIT.sql).await.map_err(error_of)?;
        let mut statements = HashMap::new();
        for named in SIDE_STATEMENTS {
            statements.insert(named.name, client.prepare(named.sql).await.map_err(error_of)?);
        }
        Ok(Self { client, wakeups, alive, listening: Default::default(), statements, broken: Default::default() })
    }

    /// Whether its connection has closed (a new one is needed).
    pub fn is_closed(&self) -> bool {
        self.broken.load(std::sync::atomic::Ordering::Relaxed) || self.client.is_closed()
    }

    /// Marks it broken when `result` failed for the connection.
    pub(super) fn watch<T>(&self, result: Result<T, BrokerError>) -> Result<T, BrokerError> {
        if let Err(e) = &result
            && e.kind == ErrorKind::Connection
        {
            self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `n` is ready now (polled once).
    fn ready(n: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>) -> bool {
        let waker = std::task::Waker::noop();
        std::future::Future::poll(n, &mut std::task::Context::from_waker(waker)).is_ready()
    }

    #[test]
    fn a_group_wakes_one_waiter_and_a_bare_wake_up_every_one() {
        let w = Wakeups::default();
        let n = &w.of("sb_queue_1").any;
        let (a, b) = (n.notified(), n.notified());
        tokio::pin!(a, b);
        a.as_mut().enable();
        b.as_mut().enable();
        w.deliver("sb_queue_1", "0b3c1d52-7d1e-4c6f-9a51-3f2f8e0c9a10");
        assert!(ready(a.as_mut()), "the first waiter is woken");
        assert!(!ready(b.as_mut()), "one wake-up wakes one waiter");
        w.deliver("sb_queue_2", "");
        assert!(!ready(b.as_mut()), "another queue's wake-up is not this one's");
        let c = n.notified();
        tokio::pin!(c);
        c.as_mut().enable();
        w.deliver("sb_queue_1", "");
        assert!(ready(b.as_mut()) && ready(c.as_mut()), "a wake-up naming no group wakes every waiter");
    }

    #[test]
    fn a_session_waiting_for_its_own_group_is_woken_by_every_wake_up() {
        let w = Wakeups::default();
        let q = w.of("sb_queue_1");
        let (any, own) = (q.any.notified(), q.restricted.notified());
        tokio::pin!(any, own);
        any.as_mut().enable();
        own.as_mut().enable();
        w.deliver("sb_queue_1", "g");
        assert!(ready(any.as_mut()), "the turn goes to a session taking any group");
        assert!(ready(own.as_mut()), "and the session waiting for its own group looks too");
    }

    #[test]
    fn a_wake_up_its_waiter_drops_passes_to_the_next() {
        let w = Wakeups::default();
        let n = &w.of("sb_queue_1").any;
        let a = Box::pin(n.notified());
        let b = n.notified();
        tokio::pin!(b);
        let mut a = a;
        a.as_mut().enable();
        b.as_mut().enable();
        w.deliver("sb_queue_1", "g");
        // The first waiter found its message without waiting and goes.
        drop(a);
        assert!(ready(b.as_mut()), "the wake-up went on to the next waiter");
    }
}
