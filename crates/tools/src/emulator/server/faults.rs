//! The faults the emulator injects (deadlocks, lock timeouts, dropped connections,
//! delays), settable while it serves.

use super::{AtomicU64, Duration, HashMap, Ordering};

/// Faults the emulator injects, for tests of what a client does about them (`sbworker
/// emulator --fault-…`). Counted over all connections; only a RECEIVE that took messages
/// (and only the COMMIT of a transaction that did) counts, so each fault hits real work:
/// its transaction rolls back and the messages return to the queue. A period of 0 is
/// off; every setting can be changed while the emulator serves (a test turns the faults
/// off to see the work finish).
#[derive(Debug, Default)]
pub struct Faults {
    /// Every Nth such RECEIVE fails with deadlock 1205 instead of returning its rows.
    deadlock_every: AtomicU64,
    /// Every Nth such RECEIVE fails with lock timeout 1222.
    lock_timeout_every: AtomicU64,
    /// Every Nth such RECEIVE drops the connection instead of answering (mid-transaction).
    drop_every: AtomicU64,
    /// Every Nth SEND of a transaction that received drops the connection before COMMIT.
    send_drop_every: AtomicU64,
    sends: AtomicU64,
    /// Every Nth such COMMIT fails with deadlock 1205 (the transaction rolled back).
    commit_deadlock_every: AtomicU64,
    /// A request still running after this many milliseconds (blocked on a lock) drops
    /// its connection, as a killed session does; 0 is off.
    drop_blocked_after_ms: AtomicU64,
    /// How many of the next outermost BEGIN TRANSACTIONs fail (error 3988).
    begin_fail_next: AtomicU64,
    /// Every response waits this long before it is written.
    pub delay: Duration,
    receives: AtomicU64,
    commits: AtomicU64,
    /// Group RECEIVEs that found their group held by another session and waited.
    group_lock_waits: AtomicU64,
    injected: AtomicU64,
    /// What each queue was asked, by the broker's name of it (not a fault: counted so a
    /// test of an idle worker sees what it costs, and read by the emulated activation).
    queues: std::sync::Mutex<HashMap<String, QueueAsked>>,
}

/// What a queue was asked over all connections.
#[derive(Debug, Default, Clone, Copy)]
struct QueueAsked {
    /// Statements that looked at it: RECEIVE, GET CONVERSATION GROUP, `COUNT(*)`,
    /// `sbworker.queue_state`.
    looks: u64,
    /// RECEIVEs (without WHERE) and GET CONVERSATION GROUPs waiting on it now.
    waiting: u64,
    /// When a RECEIVE on it last ended.
    received: Option<tokio::time::Instant>,
}

/// A RECEIVE or GET CONVERSATION GROUP running on a queue (counted as waiting there while
/// it lives, when it takes any group).
pub(super) struct Receiving<'a> {
    faults: &'a Faults,
    queue: String,
    waiting: bool,
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        let mut queues = self.faults.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let q = queues.entry(std::mem::take(&mut self.queue)).or_default();
        if self.waiting {
            q.waiting = q.waiting.saturating_sub(1);
        }
        q.received = Some(tokio::time::Instant::now());
    }
}

/// What a RECEIVE meets.
pub(super) enum Injected {
    Deadlock,
    LockTimeout,
    Drop,
}

impl Faults {
    pub fn new(deadlock_every: Option<u64>, drop_every: Option<u64>, delay: Duration) -> Self {
        let f = Faults { delay, ..Faults::default() };
        f.set_receive_faults(deadlock_every, None, drop_every);
        f
    }

    /// How many group RECEIVEs have found their group held by another session and
    /// waited for it (not a fault: what SQL Server most likely does; counted so a test
    /// knows the wait has begun).
    pub fn group_lock_waits(&self) -> u64 {
        self.group_lock_waits.load(Ordering::SeqCst)
    }

    pub(super) fn note_group_lock_wait(&self) {
        self.group_lock_waits.fetch_add(1, Ordering::SeqCst);
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<String, QueueAsked>> {
        self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many statements have looked at `queue` (by the broker's name: no schema):
    /// RECEIVE, GET CONVERSATION GROUP, `COUNT(*)` and `sbworker.queue_state`.
    pub fn queue_looks(&self, queue: &str) -> u64 {
        self.queues().get(queue).map_or(0, |q| q.looks)
    }

    /// How many RECEIVEs (without WHERE) and GET CONVERSATION GROUPs wait on `queue` now.
    pub fn waiting_on(&self, queue: &str) -> u64 {
        self.queues().get(queue).map_or(0, |q| q.waiting)
    }

    /// A statement looked at `queue`.
    pub(super) fn look(&self, queue: &str) {
        self.queues().entry(queue.to_owned()).or_default().looks += 1;
    }

    /// A RECEIVE or GET CONVERSATION GROUP begins on `queue` (a look); one of any group
    /// (`waiting`: no WHERE) counts as waiting there until the guard is dropped, which
    /// notes that a RECEIVE ran.
    pub(super) fn receives(&self, queue: &str, waiting: bool) -> Receiving<'_> {
        let mut queues = self.queues();
        let q = queues.entry(queue.to_owned()).or_default();
        q.looks += 1;
        if waiting {
            q.waiting += 1;
        }
        Receiving { faults: self, queue: queue.to_owned(), waiting }
    }

    /// When a RECEIVE or GET CONVERSATION GROUP on `queue` last ended.
    pub(super) fn received_at(&self, queue: &str) -> Option<tokio::time::Instant> {
        self.queues().get(queue).and_then(|q| q.received)
    }

    /// The periods of the faults at RECEIVE (None: off).
    pub fn set_receive_faults(&self, deadlock: Option<u64>, lock_timeout: Option<u64>, drop: Option<u64>) {
        self.deadlock_every.store(deadlock.unwrap_or(0), Ordering::SeqCst);
        self.lock_timeout_every.store(lock_timeout.unwrap_or(0), Ordering::SeqCst);
        self.drop_every.store(drop.unwrap_or(0), Ordering::SeqCst);
    }

    /// The period of deadlocks at COMMIT (None: off).
    pub fn set_commit_deadlock_every(&self, every: Option<u64>) {
        self.commit_deadlock_every.store(every.unwrap_or(0), Ordering::SeqCst);
    }

    /// Every Nth SEND inside a transaction that received messages (a reply, between
    /// its SEND and its COMMIT) drops the connection: the transaction rolls back (None: off).
    pub fn set_send_drop_every(&self, every: Option<u64>) {
        self.send_drop_every.store(every.unwrap_or(0), Ordering::SeqCst);
    }

    /// Counts a SEND in a transaction that received messages; true: it drops the connection.
    pub(super) fn on_send(&self) -> bool {
        let n = self.sends.fetch_add(1, Ordering::Relaxed) + 1;
        self.count(Self::hit(&self.send_drop_every, n))
    }

    /// The next `n` outermost BEGIN TRANSACTIONs fail with error 3988 (SQL Server's for a
    /// new transaction while other requests run in the session), each on a live
    /// connection.
    pub fn set_begin_fail_next(&self, n: u64) {
        self.begin_fail_next.store(n, Ordering::SeqCst);
    }

    /// Counts an outermost BEGIN TRANSACTION; true: it fails.
    pub(super) fn on_begin(&self) -> bool {
        let failed =
            self.begin_fail_next.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        self.count(failed)
    }

    /// Drop the connection of a request still running after `after` (None: off).
    pub fn set_drop_blocked_after(&self, after: Option<Duration>) {
        self.drop_blocked_after_ms.store(after.map_or(0, |d| d.as_millis().max(1) as u64), Ordering::SeqCst);
    }

    /// Every fault off (the delay stays).
    pub fn clear(&self) {
        self.set_receive_faults(None, None, None);
        self.set_commit_deadlock_every(None);
        self.set_drop_blocked_after(None);
        self.set_send_drop_every(None);
        self.set_begin_fail_next(0);
    }

    pub(super) fn drop_blocked_after(&self) -> Option<Duration> {
        let ms = self.drop_blocked_after_ms.load(Ordering::SeqCst);
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    fn hit(every: &AtomicU64, n: u64) -> bool {
        let e = every.load(Ordering::SeqCst);
        e > 0 && n % e == 0
    }

    fn count(&self, fault: bool) -> bool {
        if fault {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        fault
    }

    /// Counts a RECEIVE that took messages; the fault it meets, if any.
    pub(super) fn on_receive(&self) -> Option<Injected> {
        let n = self.receives.fetch_add(1, Ordering::Relaxed) + 1;
        let fault = if Self::hit(&self.deadlock_every, n) {
            Some(Injected::Deadlock)
        } else if Self::hit(&self.lock_timeout_every, n) {
            Some(Injected::LockTimeout)
        } else if Self::hit(&self.drop_every, n) {
            Some(Injected::Drop)
        } else {
            None
        };
        self.count(fault.is_some());
        fault
    }

    /// Counts a COMMIT of a transaction that received messages; true: it deadlocks.
    pub(super) fn on_commit(&self) -> bool {
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        self.count(Self::hit(&self.commit_deadlock_every, n))
    }

    /// A blocked request's connection dropped.
    pub(super) fn on_blocked_drop(&self) {
        self.count(true);
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }
}
