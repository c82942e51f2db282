//! SQL Server's event-based activation, emulated for the worker's idle wait: a RECEIVE
//! from `sbworker.activation` (the notification queue of
//! `broker/mssql/optional/activation.sql`) is answered with QUEUE_ACTIVATION event
//! notifications made by the emulator's own queue monitors.
//!
//! What it emulates (docs/emulator.md, "Event-based activation"): the notification queue
//! exists when the PostgreSQL broker has a queue named `activation` (a test makes it with
//! `sb.create_queue`, standing for the optional script; without it the RECEIVE fails with
//! 208, as on a server without the script). Every other queue of the broker counts as
//! having a QUEUE_ACTIVATION event notification to it. A queue monitor per queue, started
//! at the first RECEIVE from the notification queue, waits on the PostgreSQL broker's
//! wake-up for its queue (`Session::wait_for_work`, no polling) and, while the queue has
//! messages, looks again every second; it makes a notification when a new reader would
//! have work as "Understanding When Activation Occurs" says: messages wait, no RECEIVE
//! (without WHERE) or GET CONVERSATION GROUP waits on the queue, and none was made within
//! a time-out of 5 s unless a RECEIVE ran on the queue since. Notifications wait in memory
//! (not in the broker's `activation` queue) until a RECEIVE takes them, TOP n at a time,
//! each on its queue's own conversation, as an EVENT_INSTANCE document in UTF-16.
//!
//! Not emulated: CREATE EVENT NOTIFICATION and the other DDL (the script is checked
//! statically only); a RECEIVE of it inside a transaction takes the notifications for
//! good, even if the transaction rolls back; `WHERE` on it is refused; the messages
//! a receiving transaction holds count as waiting (as the emulator's `COUNT(*)` counts
//! them); no EndDialog or Error ever comes on it.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::*;

/// The notification queue as the PostgreSQL broker names it (`sbworker.activation`
/// without its schema).
const NOTIFICATIONS: &str = "activation";

/// How long a monitor waits on the broker's wake-up before it waits again.
const MONITOR_WAIT: Duration = Duration::from_secs(30);
/// How often a monitor looks again while its queue has messages ("every few seconds").
const CHECK: Duration = Duration::from_secs(1);
/// No other notification for a queue within this time of one, unless a RECEIVE ran on
/// it since (SQL Server's time-out for an external reader; its length is not documented).
const REPEAT: Duration = Duration::from_secs(5);
/// The most notifications kept for a RECEIVE (the rest are dropped: SQL Server makes
/// another while activation is needed).
const MAX_PENDING: usize = 10_000;

const EVENT_NOTIFICATION: &str = "http://schemas.microsoft.com/SQL/Notifications/EventNotification";
const POST_EVENT_NOTIFICATION: &str = "http://schemas.microsoft.com/SQL/Notifications/PostEventNotification";
const SERVICE: &str = "/sbworker/Activation";

/// Whether a RECEIVE names the notification queue: `sbworker.activation` (in any
/// database, any case).
pub(super) fn is_notification_queue(name: &str) -> bool {
    let mut parts = name.rsplit('.');
    matches!((parts.next(), parts.next()), (Some(q), Some(s))
        if q.eq_ignore_ascii_case(NOTIFICATIONS) && s.eq_ignore_ascii_case("sbworker"))
}

/// The emulated activation of one emulator (one PostgreSQL database): its monitors and
/// the notifications they made.
pub(super) struct Activation {
    pg_url: Arc<String>,
    faults: Arc<Faults>,
    stop: Stop,
    state: Mutex<State>,
    /// A notification was made.
    arrived: Notify,
}

#[derive(Default)]
struct State {
    /// The database's name, for the notifications' DatabaseName.
    database: String,
    /// Queues with a monitor running.
    monitors: HashSet<String>,
    /// Notifications made, not yet received.
    pending: VecDeque<Message>,
    /// Per queue: its notifications' conversation, their last sequence number, when the
    /// last was made.
    conversations: HashMap<String, (Uuid, i64, Option<Instant>)>,
}

impl Activation {
    pub(super) fn new(pg_url: Arc<String>, faults: Arc<Faults>, stop: Stop) -> Arc<Self> {
        Arc::new(Self { pg_url, faults, stop, state: Mutex::default(), arrived: Notify::new() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `[WAITFOR (] RECEIVE [TOP (max)] … FROM sbworker.activation [), TIMEOUT wait]`: the
    /// notifications made (waiting up to `wait` for one), 208 when the broker has no
    /// notification queue.
    pub(super) async fn receive(
        self: &Arc<Self>,
        s: &Session,
        queue: &str,
        max: i32,
        wait: Duration,
    ) -> Result<Vec<Message>, Failure> {
        let row = s.client().query_one(emu::QUEUE_DEPTH.sql, &[&NOTIFICATIONS]).await.map_err(pg_failure)?;
        if !row.get::<_, bool>(1) {
            return Err(invalid_object(queue));
        }
        self.watch(s).await?;
        let deadline = Instant::now() + wait;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let taken = self.take(max);
            if !taken.is_empty() || Instant::now() >= deadline {
                return Ok(taken);
            }
            tokio::select! {
                () = &mut arrived => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Starts a monitor for every queue of the broker that has none yet.
    async fn watch(self: &Arc<Self>, s: &Session) -> Result<(), Failure> {
        let rows = s.client().query(emu::WATCHED_QUEUES.sql, &[&NOTIFICATIONS]).await.map_err(pg_failure)?;
        for r in rows {
            let (queue, database): (String, String) = (r.get(0), r.get(1));
            let new = {
                let mut st = self.lock();
                st.database = database;
                st.monitors.insert(queue.clone())
            };
            if new {
                self.monitor(queue);
            }
        }
        Ok(())
    }

    fn take(&self, max: i32) -> Vec<Message> {
        let mut st = self.lock();
        let n = st.pending.len().min(usize::try_from(max).unwrap_or(0));
        st.pending.drain(..n).collect()
    }

    /// `queue`'s monitor: on a session of its own until the emulator stops or the session
    /// fails (then a later RECEIVE starts another).
    fn monitor(self: &Arc<Self>, queue: String) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut stop = me.stop.clone();
            let watched = async {
                let mut s = Session::open(&me.pg_url).await?;
                loop {
                    if s.wait_for_work(&queue, MONITOR_WAIT).await? {
                        let state = s.queue_state(&queue).await?;
                        if state.enabled && state.messages > 0 {
                            me.activate(&queue);
                        }
                        // While it has work, the monitor looks again in a moment.
                        tokio::time::sleep(CHECK).await;
                    }
                }
            };
            let ended: Result<(), BrokerError> = tokio::select! {
                _ = stop.stopped() => Ok(()),
                r = watched => r,
            };
            if let Err(e) = ended {
                debug!(queue, "the queue monitor ended: {e}");
            }
            me.lock().monitors.remove(&queue);
        });
    }

    /// `queue` has messages: a notification, if a new reader would have work.
    fn activate(&self, queue: &str) {
        if self.faults.waiting_on(queue) > 0 {
            return;
        }
        let received = self.faults.received_at(queue);
        let mut st = self.lock();
        let database = st.database.clone();
        let (handle, sequence, last) = st.conversations.entry(queue.to_owned()).or_insert((Uuid::new_v4(), 0, None));
        if let Some(at) = *last
            && at.elapsed() < REPEAT
            && received.is_none_or(|r| r <= at)
        {
            return;
        }
        *sequence += 1;
        *last = Some(Instant::now());
        let message = Message {
            id: 0,
            conversation_group_id: *handle,
            conversation_handle: *handle,
            sequence: *sequence,
            message_type: EVENT_NOTIFICATION.into(),
            body: event_instance(&database, queue),
            service: SERVICE.into(),
            contract: POST_EVENT_NOTIFICATION.into(),
        };
        if st.pending.len() < MAX_PENDING {
            st.pending.push_back(message);
        }
        drop(st);
        debug!(queue, "QUEUE_ACTIVATION");
        self.arrived.notify_waiters();
    }
}

/// The EVENT_INSTANCE of a QUEUE_ACTIVATION for `queue` (the broker's queues are SQL
/// Server's `dbo` ones), in UTF-16LE with a byte-order mark, as SQL Server keeps xml.
fn event_instance(database: &str, queue: &str) -> Vec<u8> {
    use quick_xml::escape::escape;
    let text = format!(
        "<EVENT_INSTANCE><EventType>QUEUE_ACTIVATION</EventType><PostTime>{}</PostTime><SPID>0</SPID>\
         <ServerName>sbworker-emulator</ServerName><LoginName>sa</LoginName><UserName>dbo</UserName>\
         <DatabaseName>{}</DatabaseName><SchemaName>dbo</SchemaName><ObjectName>{}</ObjectName>\
         <ObjectType>QUEUE</ObjectType></EVENT_INSTANCE>",
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3f"),
        escape(database),
        escape(queue)
    );
    let mut body = vec![0xFF, 0xFE];
    body.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notification_queue_is_named_with_its_schema_and_its_events_read_as_the_worker_reads_them() {
        for yes in ["sbworker.activation", "SBWORKER.Activation", "payroll.sbworker.activation"] {
            assert!(is_notification_queue(yes), "{yes}");
        }
        for no in ["activation", "dbo.activation", "sbworker.activations", "loonfactorberekening_reken"] {
            assert!(!is_notification_queue(no), "{no}");
        }
        let (event, named) =
            crate::broker::mssql::event_instance(&event_instance("pay&roll", "loonfactorberekening_reken"))
                .expect("an EVENT_INSTANCE");
        assert_eq!(event, "QUEUE_ACTIVATION");
        assert_eq!((named.database.as_str(), named.schema.as_str()), ("pay&roll", "dbo"));
        assert_eq!(named.queue, "loonfactorberekening_reken");
    }
}
