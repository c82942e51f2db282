//! The side connection a session (or every session of a transport) shares: it LISTENs
//! for wake-ups and writes what must outlive a rollback.

use super::*;

/// The statements that run on the side connection, prepared when it opens.
pub(super) const SIDE_STATEMENTS: [Named; 3] = [S::COUNT_ATTEMPTS, S::NOTE_FAILURE, S::QUEUE_STATE];

/// The side connection: never in a transaction, it LISTENs for the queues' wake-ups and
/// writes what must outlive a rollback (attempt counts, failure notes). One side serves
/// one session ([`Session::open`]) or every session of a [`PostgresTransport`], whose
/// readers then cost one connection each plus one in all. tokio-postgres pipelines the
/// queries of sessions sharing it on the one connection; none of them waits for a lock
/// a session's open transaction holds (a message's count is written only by the
/// transaction that received it, and while no transaction holds the message).
pub struct Side {
    pub(super) client: Client,
    pub(super) wakeups: watch::Receiver<u64>,
    /// The queues LISTENed for (LISTEN twice is harmless: two sessions may race here).
    pub(super) listening: std::sync::Mutex<Vec<String>>,
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
        let (tx, rx) = watch::channel(0u64);
        let client = connect(at, Some(tx)).await?;
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
        Ok(Self {
            client,
            wakeups: rx,
            listening: std::sync::Mutex::new(Vec::new()),
            statements,
            broken: Default::default(),
        })
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
