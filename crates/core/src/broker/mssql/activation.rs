//! SQL Server's event-based activation, as an idle supervisor waits on it
//! ([`crate::transport::Session::wait_for_work`]): the optional script
//! `broker/mssql/optional/activation.sql` puts a QUEUE_ACTIVATION event notification on
//! each of the side's queues, sent to the queue `sbworker.activation`, and a supervisor
//! with no reader waits in a RECEIVE there, as the External Activator waits, instead of
//! looking at its queue at every tick.
//!
//! SQL Server sends the event when a new reader would have work (a message on an empty
//! queue, or messages waiting while no session waits in a RECEIVE), and again after a
//! time-out for as long as that holds ("Understanding When Activation Occurs"). Every
//! worker process waiting on the one queue takes what it receives: a notification for a
//! queue another process serves is lost to that process, which hears of the queue again
//! at SQL Server's next event or at its own next look (at most the supervisor's idle
//! wait, 30 s). Within a process nothing is lost: one session receives at a time for all
//! the sessions of its transport ([`Hub`]), and hands each notification to the queue's
//! own wait. Without the script (error 208, the queue does not exist) or without RECEIVE
//! on it (229), a wait answers at once, as before the script existed: the supervisor
//! looks at every tick; it is tried again every five minutes.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::BrokerError;

/// The queue the event notifications go to (`optional/activation.sql`).
pub const NOTIFICATION_QUEUE: &str = "sbworker.activation";

/// The message types on the notification queue.
const EVENT_NOTIFICATION: &str = "http://schemas.microsoft.com/SQL/Notifications/EventNotification";
const END_DIALOG: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog";
const ERROR: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/Error";

/// The most notifications one RECEIVE takes: they gather while every queue has readers
/// (SQL Server repeats the event while messages wait and every reader is busy), and the
/// next wait takes them in one go.
pub(super) const TAKE: i32 = 1000;

/// How long a missing notification queue is believed missing before it is tried again
/// (an install of the script while the worker runs takes effect within it).
const RETRY_MISSING: Duration = Duration::from_secs(300);

/// What a QUEUE_ACTIVATION notification names: the queue, its schema and database
/// (`DatabaseName`, `SchemaName`, `ObjectName` of its EVENT_INSTANCE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activated {
    pub database: String,
    pub schema: String,
    pub queue: String,
}

/// An EVENT_INSTANCE document's `EventType` and the object it names; None when the body
/// is not one (not XML, another root, no ObjectName).
pub fn event_instance(body: &[u8]) -> Option<(String, Activated)> {
    use quick_xml::events::Event;
    // SQL Server sends EVENTDATA as UTF-16 ("Unicode that uses 2 bytes for each
    // character"), with a byte-order mark or without; UTF-8 is read too.
    let text = crate::contract::body_text(body, &crate::contract::Limits::default()).ok()?;
    let mut reader = quick_xml::Reader::from_str(&text);
    // The element being read among EVENT_INSTANCE's children, and its text so far (text
    // comes in pieces around entity references).
    let (mut depth, mut field, mut value) = (0usize, None::<String>, String::new());
    let (mut event_type, mut database, mut schema, mut queue) = (String::new(), String::new(), String::new(), None);
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) => {
                let name = e.local_name().into_inner().to_owned();
                if depth == 0 && name != "EVENT_INSTANCE" {
                    return None;
                }
                depth += 1;
                field = (depth == 2).then_some(name);
                value.clear();
            }
            Event::Empty(e) if depth == 0 && e.local_name().into_inner() != "EVENT_INSTANCE" => return None,
            Event::End(_) => {
                if depth == 2 {
                    let v = std::mem::take(&mut value);
                    match field.take().as_deref() {
                        Some("EventType") => event_type = v,
                        Some("DatabaseName") => database = v,
                        Some("SchemaName") => schema = v,
                        Some("ObjectName") => queue = Some(v),
                        _ => {}
                    }
                }
                depth = depth.checked_sub(1)?;
            }
            Event::Text(t) if depth == 2 => value.push_str(&t.xml10_content()),
            Event::CData(t) if depth == 2 => value.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if depth == 2 => match r.resolve_char_ref().ok()? {
                Some(c) => value.push(c),
                None => value.push_str(quick_xml::escape::resolve_predefined_entity(&r)?),
            },
            Event::Eof if depth == 0 => break,
            Event::Eof => return None,
            _ => {}
        }
    }
    Some((event_type, Activated { database, schema, queue: queue? }))
}

/// A queue's name as the worker is configured with it (`queue`, `schema.queue` or
/// `database.schema.queue`), to compare with what a notification names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct QueueName {
    database: Option<String>,
    schema: Option<String>,
    queue: String,
}

impl QueueName {
    pub(super) fn parse(name: &str) -> Self {
        let mut parts: Vec<String> = name.split('.').map(|p| p.trim().trim_matches(['[', ']']).to_owned()).collect();
        let queue = parts.pop().unwrap_or_default();
        let schema = parts.pop();
        let database = parts.pop();
        Self { database, schema, queue }
    }

    /// Whether `a` names this queue: the parts this name has, compared without regard to
    /// case (as the default collations compare names; in a case-sensitive database two
    /// queues told apart by case alone would both wake: one look too many). A name without
    /// its schema matches the queue in any schema.
    pub(super) fn is(&self, a: &Activated) -> bool {
        let same = |mine: &Option<String>, theirs: &str| mine.as_ref().is_none_or(|m| eq_names(m, theirs));
        eq_names(&self.queue, &a.queue) && same(&self.schema, &a.schema) && same(&self.database, &a.database)
    }
}

fn eq_names(a: &str, b: &str) -> bool {
    a.to_lowercase() == b.to_lowercase()
}

/// What one RECEIVE from the notification queue brought.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// The queues QUEUE_ACTIVATION named, once each.
    pub activated: Vec<Activated>,
    /// Conversations that ended (EndDialog, Error): ended on this side too.
    pub ended: Vec<uuid::Uuid>,
    /// Rows read (a full [`TAKE`]: more may wait).
    pub rows: usize,
}

impl Received {
    /// Sorts the rows of a RECEIVE: (conversation handle, message type, body).
    pub(super) fn of<'a>(
        rows: impl IntoIterator<Item = (Option<uuid::Uuid>, Option<&'a str>, Option<&'a [u8]>)>,
    ) -> Self {
        let mut out = Received::default();
        for (handle, message_type, body) in rows {
            out.rows += 1;
            match message_type.unwrap_or_default() {
                EVENT_NOTIFICATION => match body.and_then(event_instance) {
                    Some((event, a)) if event.eq_ignore_ascii_case("QUEUE_ACTIVATION") => {
                        if !out.activated.contains(&a) {
                            out.activated.push(a);
                        }
                    }
                    Some((event, a)) => {
                        debug!(event, queue = %a.queue, "an event notification that is no QUEUE_ACTIVATION: ignored")
                    }
                    None => warn!("an event notification whose body is no EVENT_INSTANCE: ignored"),
                },
                END_DIALOG | ERROR => {
                    info!(
                        "an event notification's conversation ended (the notification was dropped?): its queue's idle \
                         supervisor looks at it every 30 s until broker/mssql/optional/activation.sql is run again"
                    );
                    out.ended.extend(handle);
                }
                other => debug!(message_type = other, "a message on the notification queue that is no event: ignored"),
            }
        }
        out
    }
}

/// The waits of one transport's sessions (one database): one session receives from the
/// notification queue at a time, for all; each notification goes to the wait of the
/// queue it names, now or at that queue's next wait.
#[derive(Default)]
pub(super) struct Hub {
    state: Mutex<State>,
    /// A receive ended, or brought notifications: every waiting session looks again.
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// A session is receiving for everyone.
    receiving: bool,
    /// Queues named by notifications that no wait has taken yet.
    pending: Vec<Activated>,
    /// The notification queue could not be read (missing, or not granted), since when.
    unavailable_since: Option<Instant>,
    /// Whether that has been said (once: info, or a warning for a missing grant).
    said: bool,
}

/// What a waiting session does next.
pub(super) enum Turn {
    /// A notification named its queue (or the notification queue cannot be read): it has
    /// work to look at.
    Work,
    /// It receives for everyone: [`Hub::received`] or [`Hub::unavailable`] when done.
    Receive(Receiving),
    /// Another session receives: wait for [`Hub::changed`] (until its deadline).
    Wait,
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A waiter's future woken by the next change (enabled: a change between now and its
    /// await is not missed).
    pub(super) fn changed(&self) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut n = Box::pin(self.changed.notified());
        n.as_mut().enable();
        n
    }

    /// Takes a notification for `queue` if one came; else the session's turn.
    pub(super) fn turn(self: &std::sync::Arc<Self>, queue: &QueueName) -> Turn {
        let mut st = self.lock();
        if Self::take_locked(&mut st, queue) {
            return Turn::Work;
        }
        if st.unavailable_since.is_some_and(|t| t.elapsed() < RETRY_MISSING) {
            return Turn::Work;
        }
        if st.receiving {
            return Turn::Wait;
        }
        st.receiving = true;
        Turn::Receive(Receiving { hub: self.clone() })
    }

    /// Takes a notification for `queue`, if one came.
    pub(super) fn take(&self, queue: &QueueName) -> bool {
        Self::take_locked(&mut self.lock(), queue)
    }

    fn take_locked(st: &mut State, queue: &QueueName) -> bool {
        let before = st.pending.len();
        st.pending.retain(|a| !queue.is(a));
        st.pending.len() < before
    }

    /// The notification queue answered: its notifications are handed out.
    pub(super) fn received(&self, activated: Vec<Activated>) {
        let mut st = self.lock();
        if st.unavailable_since.take().is_some() && st.said {
            info!("event-based activation found ({NOTIFICATION_QUEUE}): idle queues wait for its notifications");
            st.said = false;
        }
        for a in activated {
            if !st.pending.contains(&a) {
                st.pending.push(a);
            }
        }
    }

    /// The notification queue cannot be read (`e`: 208, no such object; 229, no RECEIVE
    /// on it): waits answer at once for a while, as without event-based activation.
    pub(super) fn unavailable(&self, e: &BrokerError) {
        let mut st = self.lock();
        st.unavailable_since = Some(Instant::now());
        if !st.said {
            st.said = true;
            if e.number == 229 {
                warn!(
                    "the worker's login may not RECEIVE from {NOTIFICATION_QUEUE} ({}): idle queues are looked at every \
                     scale interval; GRANT RECEIVE ON OBJECT::{NOTIFICATION_QUEUE} TO sbworker_role \
                     (broker/mssql/optional/activation.sql does)",
                    e.message
                );
            } else {
                info!(
                    "no {NOTIFICATION_QUEUE} in this database: idle queues (min_readers = 0) are looked at every scale \
                     interval; run broker/mssql/optional/activation.sql to let them wait for SQL Server's \
                     QUEUE_ACTIVATION event instead (docs/sqlserver.md)"
                );
            }
        }
    }
}

/// Whether `e` says the notification queue cannot be read (rather than that the
/// connection failed): 208, invalid object name (no such queue, or one the login cannot
/// see); 229, a permission denied on it.
pub(super) fn is_unavailable(e: &BrokerError) -> bool {
    matches!(e.number, 208 | 229)
}

/// The turn of the session that receives for everyone: given back when dropped (its
/// receive ended, or was cancelled with its session), and every waiter told.
pub(super) struct Receiving {
    hub: std::sync::Arc<Hub>,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        self.hub.lock().receiving = false;
        self.hub.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An EVENT_INSTANCE as SQL Server sends it for QUEUE_ACTIVATION (the elements of
    /// the event's schema; a real one from a server log has the same).
    fn event(queue: &str) -> String {
        format!(
            "<EVENT_INSTANCE><EventType>QUEUE_ACTIVATION</EventType><PostTime>2026-12-07T10:01:06.363</PostTime>\
             <SPID>30</SPID><ServerName>DB1\\PROD</ServerName><LoginName>sa</LoginName><UserName>dbo</UserName>\
             <DatabaseName>Payroll</DatabaseName><SchemaName>dbo</SchemaName><ObjectName>{queue}</ObjectName>\
             <ObjectType>QUEUE</ObjectType></EVENT_INSTANCE>"
        )
    }

    fn utf16(text: &str, bom: bool) -> Vec<u8> {
        let mut out = if bom { vec![0xFF, 0xFE] } else { Vec::new() };
        out.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
        out
    }

    #[test]
    fn an_event_instance_is_read_in_each_encoding_sql_server_may_send() {
        let want =
            Activated { database: "Payroll".into(), schema: "dbo".into(), queue: "loonfactorberekening_reken".into() };
        let text = event("loonfactorberekening_reken");
        let pretty = text.replace("><", ">\n  <");
        for body in [utf16(&text, true), utf16(&text, false), text.clone().into_bytes(), utf16(&pretty, true)] {
            assert_eq!(event_instance(&body), Some(("QUEUE_ACTIVATION".into(), want.clone())));
        }
        // Escaped text is unescaped; a queue named with a bracket or an ampersand is read whole.
        let odd = event("a&amp;b]c");
        assert_eq!(event_instance(odd.as_bytes()).unwrap().1.queue, "a&b]c");
        // Not an EVENT_INSTANCE: none.
        for bad in ["", "not xml", "<Other><ObjectName>q</ObjectName></Other>", "<EVENT_INSTANCE/>", "<EVENT_INSTANCE>"]
        {
            assert_eq!(event_instance(bad.as_bytes()), None, "{bad}");
        }
        // An element deeper down with the same name does not count.
        let nested = "<EVENT_INSTANCE><X><ObjectName>no</ObjectName></X><ObjectName>yes</ObjectName></EVENT_INSTANCE>";
        assert_eq!(event_instance(nested.as_bytes()).unwrap().1.queue, "yes");
    }

    #[test]
    fn a_configured_name_matches_the_parts_it_has_without_regard_to_case() {
        let a =
            Activated { database: "Payroll".into(), schema: "dbo".into(), queue: "Loonfactorberekening_Reken".into() };
        for yes in [
            "loonfactorberekening_reken",
            "dbo.loonfactorberekening_reken",
            "DBO.LOONFACTORBEREKENING_REKEN",
            "payroll.dbo.loonfactorberekening_reken",
            "[dbo].[loonfactorberekening_reken]",
        ] {
            assert!(QueueName::parse(yes).is(&a), "{yes}");
        }
        for no in [
            "loonfactorberekening_data",
            "other.loonfactorberekening_reken",
            "Rekenserver.dbo.loonfactorberekening_reken",
            "loonfactorberekening_reke",
        ] {
            assert!(!QueueName::parse(no).is(&a), "{no}");
        }
    }

    #[test]
    fn received_rows_are_sorted_into_queues_and_ended_conversations() {
        let reken = utf16(&event("loonfactorberekening_reken"), true);
        let data = utf16(&event("loonfactorberekening_data"), true);
        let other = event("x").replace("QUEUE_ACTIVATION", "BROKER_QUEUE_DISABLED");
        let h = uuid::Uuid::new_v4();
        let r = Received::of([
            (Some(h), Some(EVENT_NOTIFICATION), Some(reken.as_slice())),
            (Some(h), Some(EVENT_NOTIFICATION), Some(reken.as_slice())),
            (Some(h), Some(EVENT_NOTIFICATION), Some(data.as_slice())),
            (Some(h), Some(EVENT_NOTIFICATION), Some(other.as_bytes())),
            (Some(h), Some(EVENT_NOTIFICATION), Some(b"garbage".as_slice())),
            (Some(h), Some(END_DIALOG), None),
            (Some(h), Some("DEFAULT"), None),
        ]);
        let queues: Vec<&str> = r.activated.iter().map(|a| a.queue.as_str()).collect();
        assert_eq!(queues, ["loonfactorberekening_reken", "loonfactorberekening_data"], "once each");
        assert_eq!((r.ended, r.rows), (vec![h], 7));
    }

    #[test]
    fn one_session_receives_for_all_and_each_notification_reaches_its_queue() {
        let hub = std::sync::Arc::new(Hub::default());
        let (reken, data) =
            (QueueName::parse("dbo.loonfactorberekening_reken"), QueueName::parse("loonfactorberekening_data"));
        let Turn::Receive(turn) = hub.turn(&reken) else { panic!("the first wait receives") };
        assert!(matches!(hub.turn(&data), Turn::Wait), "the second waits for the first");
        let mut changed = hub.changed();
        let named = |q: &str| Activated { database: "Payroll".into(), schema: "dbo".into(), queue: q.into() };
        hub.received(vec![named("loonfactorberekening_data")]);
        drop(turn);
        let waker = std::task::Waker::noop();
        assert!(
            std::future::Future::poll(changed.as_mut(), &mut std::task::Context::from_waker(waker)).is_ready(),
            "told"
        );
        // The notification for the other queue waits for that queue's wait; none for the receiver's.
        assert!(!hub.take(&reken));
        assert!(matches!(hub.turn(&data), Turn::Work));
        assert!(!hub.take(&data), "taken once");
        // A missing notification queue: every wait answers at once, and it is said once.
        let Turn::Receive(turn) = hub.turn(&reken) else { panic!("free again") };
        hub.unavailable(&BrokerError { kind: crate::transport::ErrorKind::Other, number: 208, message: "x".into() });
        drop(turn);
        assert!(matches!(hub.turn(&reken), Turn::Work) && matches!(hub.turn(&data), Turn::Work));
        assert!(is_unavailable(&BrokerError {
            kind: crate::transport::ErrorKind::Other,
            number: 229,
            message: String::new()
        }));
        assert!(!is_unavailable(&BrokerError {
            kind: crate::transport::ErrorKind::Connection,
            number: 0,
            message: String::new()
        }));
    }
}
