//! The worker-level half of the conformance suite: each scenario is written once and run
//! on every back end (the PostgreSQL transport, and the SQL Server transport over TDS
//! through the emulator), with the same assertions. Scenarios: an answer; a Fout for a
//! malformed request; the initiator's Error; an unknown message type; a real deadlock; a
//! lock held past many lock timeouts; a session killed while it waits on a lock; every
//! connection cut; a message diverted; a diversion that fails too; a disabled queue;
//! readers scaling; SIGTERM draining a real `sbworker run` process; SIGKILL in the middle
//! of a group.
//!
//! Faults are real on both back ends: the deadlock is PostgreSQL's own (the emulator
//! sends it to its client as error 1205), the lock timeout is the database's, the killed
//! session is `pg_terminate_backend` of the session doing the worker's work (over TDS the
//! emulator then closes the client's connection, as SQL Server closes a killed
//! session's). No scenario needs a capability one back end lacks, so the worker level
//! has no capability list: a scenario that could not run somewhere would be declared
//! here.

use std::sync::Arc;

use sbworker::broker::mssql::{MssqlSession, MssqlTransport};
use sbworker::broker::postgres::{PostgresTransport, Session as PgSession};
use sbworker::broker::{Message, system};
use sbworker::config::Config;
use sbworker::contract::{Limits, decode_antwoord, decode_fout, message_types};
use sbworker::emulator::server::Faults;
use sbworker::handlers::calculation;
use sbworker::transport::PayrollStore;
use sbworker::transport::system::{CONTRACT_BREACH, error_body};
use sbworker::worker::DIVERTED;
use sbworker::worker::handler::{BoxFuture, Handled, Handler, HandlerError};
use sbworker::worker::{Handlers, RunOutcome};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::calc::*;
use crate::common::faults::{
    answered_correctly_and_all_clean, fresh_key, hold_version_lock, lock_waiter, the_end_state_is_clean, vraag_for,
};
use crate::common::on_every_back_end;
use crate::common::process::Worker;
use crate::common::tds::emulator_with;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    Tds,
}

/// A fresh database with the calculation dialog; the initiator's PostgreSQL session
/// (the roster triggers' side, and a look at the broker's tables); and, over TDS, an
/// emulator in this process serving the worker.
struct World {
    kind: Kind,
    url: String,
    /// The URL the worker's database sessions use (directly, or through the emulator).
    worker_url: String,
    s: PgSession,
    tds: Option<(String, tokio::sync::watch::Sender<bool>)>,
}

impl World {
    async fn new(kind: Kind) -> Self {
        Self::with(kind, |u| u.to_owned()).await
    }

    /// `worker_url` derives the worker's database URL from the test's (settings of the
    /// worker's sessions only).
    async fn with(kind: Kind, worker_url: impl Fn(&str) -> String) -> Self {
        let (url, s) = calc_world().await;
        let worker_url = worker_url(&url);
        let tds = match kind {
            Kind::Postgres => None,
            Kind::Tds => Some(emulator_with(&worker_url, Arc::new(Faults::default())).await),
        };
        Self { kind, url, worker_url, s, tds }
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Postgres => "postgres",
            Kind::Tds => "tds (emulator)",
        }
    }

    /// The worker's configuration: the calculation queue, short retry delays.
    fn config(&self) -> Config {
        let mut c = config(&self.worker_url, "");
        c.queues.get_mut(REKEN_QUEUE).unwrap().wait_ms = 500;
        c
    }

    /// A worker in this process on this back end, serving `handler` as the calculation.
    fn start<H>(&self, cfg: Config, handler: Arc<H>) -> InProcess
    where
        H: Handler<PgSession> + Handler<MssqlSession>,
    {
        match &self.tds {
            None => {
                let h: Arc<dyn Handler<PgSession>> = handler;
                InProcess::start_on(
                    PostgresTransport::new(&self.worker_url),
                    cfg,
                    Handlers::default().with(calculation::NAME, h),
                )
            }
            Some((conn, _)) => {
                let h: Arc<dyn Handler<MssqlSession>> = handler;
                InProcess::start_on(
                    MssqlTransport::new(conn).unwrap(),
                    cfg,
                    Handlers::default().with(calculation::NAME, h),
                )
            }
        }
    }

    fn start_calculation(&self, cfg: Config) -> InProcess {
        self.start(cfg, calculation_handler())
    }

    /// The configuration file of an `sbworker run` process on this back end (`extra`
    /// TOML, `max_readers` for the calculation queue).
    fn process_config(&self, extra: &str, max_readers: u32) -> String {
        let broker = match &self.tds {
            None => format!("kind = \"postgres\"\nconnection = {}", toml::Value::String(self.worker_url.clone())),
            Some((conn, _)) => format!("kind = \"mssql\"\nconnection = {}", toml::Value::String(conn.clone())),
        };
        format!(
            "[broker]\n{broker}\n\n[worker]\nretry_min_delay_ms = 10\nretry_max_delay_ms = 200\n\n\
             [log]\nlevel = \"info\"\n\n{extra}\n\n\
             [queues.{REKEN_QUEUE}]\nhandler = \"loonfactor-berekening\"\nwait_ms = 1000\nmax_readers = {max_readers}\n"
        )
    }

    async fn count(&self, sql: &str) -> i64 {
        count(&self.s, sql).await
    }
}

fn q_metric(name: &str) -> String {
    format!("{name}{{queue=\"{REKEN_QUEUE}\"}}")
}

/// Fails every group whose request contains "poison"; the rest is the calculation's.
/// Diverted messages are answered as the calculation answers them (a Fout).
struct Poisoned;

impl<S: PayrollStore> Handler<S> for Poisoned {
    fn handle<'a>(&'a self, s: &'a mut S, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            if msgs.iter().any(|m| String::from_utf8_lossy(&m.body).contains("poison")) {
                return Err(HandlerError::Failed("the handler choked on poison".into()));
            }
            Handler::<S>::handle(&*calculation_handler(), s, msgs).await
        })
    }

    fn divert_reply(&self, m: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        Handler::<S>::divert_reply(&*calculation_handler(), m, reason)
    }
}

/// Fails every group, and its diversion reply is a message type the contract does not
/// have, so the first diversion fails too.
struct PoisonedTwice;

impl<S: PayrollStore> Handler<S> for PoisonedTwice {
    fn handle<'a>(&'a self, _: &'a mut S, _: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async { Err(HandlerError::Failed("always fails".into())) })
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        Some(("/not/in/the/contract", b"<x/>".to_vec()))
    }
}

/// When [`Recording`] fails a group holding a Vraag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Fails {
    #[default]
    Never,
    /// The first time it meets a Vraag of a dialog.
    First,
    Always,
}

/// Records the dialog of every Vraag it is given and fails as `fails` says; otherwise
/// the calculation.
#[derive(Default)]
struct Recording {
    fails: Fails,
    seen: std::sync::Mutex<Vec<Uuid>>,
}

impl<S: PayrollStore> Handler<S> for Recording {
    fn handle<'a>(&'a self, s: &'a mut S, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            let (mut any, mut first) = (false, false);
            {
                let mut seen = self.seen.lock().unwrap();
                for m in msgs.iter().filter(|m| m.message_type == message_types::VRAAG) {
                    any = true;
                    first |= !seen.contains(&m.conversation_handle);
                    seen.push(m.conversation_handle);
                }
            }
            if (self.fails == Fails::First && first) || (self.fails == Fails::Always && any) {
                return Err(HandlerError::Failed("fails on a Vraag".into()));
            }
            Handler::<S>::handle(&*calculation_handler(), s, msgs).await
        })
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        None
    }
}

/// Holds every group until the test lets it go.
struct Held {
    entered: mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
}

impl<S: PayrollStore> Handler<S> for Held {
    fn handle<'a>(&'a self, s: &'a mut S, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            let _ = self.entered.send(());
            self.release.acquire().await.map_err(|e| HandlerError::Failed(e.to_string()))?.forget();
            Handler::<S>::handle(&*calculation_handler(), s, msgs).await
        })
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        None
    }
}

// ---------------------------------------------------------------------------------
// The scenarios.

async fn answers_each_request_and_ends_its_side_with_the_answer(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let worker = w.start_calculation(w.config());
    let ids: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    let mut handles = Vec::new();
    for id in &ids {
        handles.push(ask(&mut w.s, &vraag_body(*id)).await);
    }
    let answers = collect(&mut w.s, ids.len()).await;
    for m in &answers {
        assert_eq!(m.message_type, message_types::ANTWOORD, "{name}");
        let a = decode_antwoord(&m.body, &Limits::default()).expect("an Antwoord");
        assert!(ids.contains(&a.id), "{name}: answer to an unknown Vraag {}", a.id);
        assert!(!a.mutaties.is_empty(), "{name}");
    }
    let mut answered: Vec<Uuid> = answers.iter().map(|m| m.conversation_handle).collect();
    answered.sort();
    handles.sort();
    assert_eq!(answered, handles, "{name}: one answer per dialog");
    // The worker ended its side with each answer; the initiator ends too; nothing is left.
    end_all(&mut w.s, handles).await;
    the_end_state_is_clean(&w.s, 0).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_requests_answered_total")), 10.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_conversations_ended_total")), 10.0, "{name}");
}

async fn a_malformed_vraag_gets_a_fout_naming_the_problem_and_an_error_end(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let worker = w.start_calculation(w.config());
    let body = br#"<LoonfactorBerekeningVraag xmlns="http://www.sdbgroep.nl/MPlus/Rekenserver/2008" Id="not-a-guid"/>"#;
    let h = ask(&mut w.s, body).await;
    let got = collect(&mut w.s, 2).await;
    // The Error first, although it was sent after the Fout: a receive returns a dialog's
    // Error before its other messages ("Broker System Messages").
    assert_eq!((got[0].message_type.as_str(), got[0].conversation_handle), (system::ERROR, h), "{name}");
    assert_eq!((got[1].message_type.as_str(), got[1].conversation_handle), (message_types::FOUT, h), "{name}");
    let fout = decode_fout(&got[1].body, &Limits::default()).expect("a RekenserverFout");
    assert!(fout.error_message.contains("Id"), "{name}: the Fout names the problem: {}", fout.error_message);
    let (code, text) = error_body(&got[0].body);
    assert_eq!((code, text.as_str()), (fout.error_number, fout.error_message.as_str()), "{name}");
    // Our side ended with the error; the initiator ends too and nothing is left.
    end_all(&mut w.s, [h]).await;
    the_end_state_is_clean(&w.s, 0).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_requests_faulted_total")), 1.0, "{name}");
}

async fn an_error_from_the_initiator_ends_our_side_without_an_answer(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    // Vraag and Error reach the queue before the worker starts: one batch.
    let h = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    w.s.begin().await.unwrap();
    w.s.end_conversation(h, Some((4711, "roster withdrawn"))).await.unwrap();
    w.s.commit().await.unwrap();
    let worker = w.start_calculation(w.config());
    the_end_state_is_clean(&w.s, 0).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_conversations_ended_total")), 1.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_requests_answered_total")), 0.0, "{name}: no answer");
}

/// A dialog's Error is received before its other messages: a RECEIVE that takes one
/// message (a retry after the handler failed) or a full batch gets the Error without the
/// messages behind it. The rest of that dialog comes along, so they are handled (here:
/// tried again, their attempt rows cleared, or diverted with the Error when they fail
/// every time) before the Error ends the dialog, not thrown away by that END with their
/// attempt rows left behind. One reader, so no other reader takes the group whole.
async fn a_message_behind_its_dialogs_error_is_handled_before_the_error_ends_the_dialog(kind: Kind) {
    // (how the handler fails, the batch, Vraags on the dialog, Vraags the handler is given,
    // messages diverted)
    let cases = [
        (Fails::First, 100, 1, 2, 0),
        (Fails::Never, 1, 1, 1, 0),
        (Fails::Never, 2, 2, 2, 0),
        (Fails::Always, 100, 1, 3, 2),
    ];
    for (fails, batch, vraags, handled, diverted) in cases {
        let mut w = World::new(kind).await;
        let name = w.name();
        let h = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
        w.s.begin().await.unwrap();
        for _ in 1..vraags {
            w.s.send(h, message_types::VRAAG, Some(&vraag_body(Uuid::new_v4()))).await.unwrap();
        }
        w.s.end_conversation(h, Some((4711, "roster withdrawn"))).await.unwrap();
        w.s.commit().await.unwrap();
        let handler = Arc::new(Recording { fails, ..Recording::default() });
        let mut cfg = w.config();
        let q = cfg.queues.get_mut(REKEN_QUEUE).unwrap();
        (q.batch, q.max_readers) = (batch, 1);
        let worker = w.start(cfg, handler.clone());
        the_end_state_is_clean(&w.s, diverted).await;
        let m = worker.finish().await;
        let case = format!("{name}: {fails:?}, batch {batch}, {vraags} Vraag(s)");
        // (The worker sees the target's handle of the dialog: one dialog throughout.)
        let seen = handler.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), handled, "{case}: Vraags given to the handler");
        assert!(seen.iter().all(|x| *x == seen[0]), "{case}");
        let ended = if diverted > 0 { 0.0 } else { 1.0 };
        assert_eq!(metric_in(&m, &q_metric("sbworker_conversations_ended_total")), ended, "{case}");
        assert_eq!(metric_in(&m, &q_metric("sbworker_messages_dead_lettered_total")), diverted as f64, "{case}");
    }
}

async fn an_unknown_message_type_is_a_contract_breach_ended_with_an_error(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    w.s.client()
        .batch_execute(&format!(
            "SELECT sb.create_message_type('/x/Anders', 'NONE');
             SELECT sb.create_contract('/x/Breed', ARRAY[['/x/Anders','ANY'],['{}','ANY']]);
             SELECT sb.create_service('{REKEN_SERVICE}', '{REKEN_QUEUE}', ARRAY['{CONTRACT}', '/x/Breed']);",
            message_types::FOUT
        ))
        .await
        .unwrap();
    w.s.begin().await.unwrap();
    let h = w.s.begin_dialog(DATA_SERVICE, REKEN_SERVICE, "/x/Breed", None, None).await.unwrap();
    w.s.send(h, "/x/Anders", Some(b"?")).await.unwrap();
    w.s.commit().await.unwrap();
    let worker = w.start_calculation(w.config());
    let got = collect(&mut w.s, 1).await;
    assert_eq!(got[0].message_type, system::ERROR, "{name}");
    let (code, text) = error_body(&got[0].body);
    assert_eq!(code, CONTRACT_BREACH, "{name}");
    assert!(text.contains("/x/Anders"), "{name}: {text}");
    end_all(&mut w.s, [h]).await;
    the_end_state_is_clean(&w.s, 0).await;
    assert_eq!(worker.shutdown().await, RunOutcome::Drained, "{name}");
}

async fn a_real_deadlock_is_retried_as_the_environments_fault_and_answered(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    // The test holds the key's version row ...
    let dv = fresh_key();
    let holder = hold_version_lock(&w.url, dv).await;
    holder.client().batch_execute("SET LOCAL deadlock_timeout = '10s'").await.unwrap();
    let worker = w.start_calculation(w.config());
    let body = vraag_for(dv);
    let asked = ask(&mut w.s, &body).await;
    // ... so the worker's version claim waits for it, holding the group it received.
    lock_waiter(&w.s, &[]).await;
    // Now the test wants that group: a cycle. The worker's deadlock check comes first
    // (1 s against the test's 10 s): it is the victim, its transaction rolls back.
    holder
        .client()
        .execute("SELECT 1 FROM sb.group_ready WHERE queue = $1 FOR UPDATE", &[&REKEN_QUEUE])
        .await
        .unwrap_or_else(|e| panic!("{name}: the test was chosen as the victim: {e}"));
    // Held against the environment, and named as SQL Server names it. (At least once: the
    // worker's retry can take the group back before the test's waiting statement gets
    // it, and be the deadlock's victim a second time before that statement returns.)
    wait_until("the deadlock is noted", || async {
        w.count("SELECT count(*) FROM sbworker.message_attempt WHERE transient_failures >= 1 AND last_transient_error LIKE '%1205%'")
            .await
            == 1
    })
    .await;
    assert_eq!(w.count("SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "{name}: the queue stays enabled");
    holder.client().batch_execute("ROLLBACK").await.unwrap();
    answered_correctly_and_all_clean(&mut w.s, asked, &body).await;
    let m = worker.finish().await;
    // Every retry was the environment's: the deadlock, and on a loaded machine a lock
    // timeout as well when a retry comes before the test lets go of the key's row.
    let retried = metric_in(&m, &q_metric("sbworker_groups_retried_total"));
    assert!(retried >= 1.0, "{name}: {m}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_transient_failures_total")), retried, "{name}: {m}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_messages_dead_lettered_total")), 0.0, "{name}");
}

async fn a_lock_held_past_many_lock_timeouts_is_waited_out_and_never_diverted(kind: Kind) {
    // The worker's sessions give up on a lock after 100 ms (SQL Server: 1222).
    let mut w = World::with(kind, |u| u.replace("lock_timeout=60s", "lock_timeout=100ms")).await;
    let name = w.name();
    assert_ne!(w.worker_url, w.url);
    let dv = fresh_key();
    let holder = hold_version_lock(&w.url, dv).await;
    let mut cfg = w.config();
    cfg.worker.transient_alert_ms = 300;
    cfg.worker.scale_interval_ms = 50;
    let worker = w.start_calculation(cfg);
    let body = vraag_for(dv);
    let asked = ask(&mut w.s, &body).await;
    // The wait shows: a group waiting on transient failures, and past the alert
    // threshold /readyz says so.
    wait_until("readiness names the long wait", || async {
        worker.metrics.readiness().is_err_and(|e| e.contains("groups retried on transient failures"))
            && worker.metric(&q_metric("sbworker_groups_waiting_transient")) == 1.0
    })
    .await;
    // Far more lock timeouts than max_attempts (3), and than the broker's five.
    wait_until("eight lock timeouts", || async {
        w.count("SELECT coalesce(max(transient_failures), 0)::bigint FROM sbworker.message_attempt").await >= 8
    })
    .await;
    let last: String =
        w.s.client().query_one("SELECT last_transient_error FROM sbworker.message_attempt", &[]).await.unwrap().get(0);
    assert!(last.contains("1222"), "{name}: {last}");
    assert_eq!(w.count("SELECT count(*) FROM sbworker.dead_letter").await, 0, "{name}");
    assert_eq!(w.count("SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "{name}");
    drop(holder);
    answered_correctly_and_all_clean(&mut w.s, asked, &body).await;
    wait_until("ready again once the group is answered", || async { worker.metrics.readiness().is_ok() }).await;
    assert_eq!(worker.shutdown().await, RunOutcome::Drained, "{name}");
}

async fn a_session_killed_while_it_waits_on_a_lock_five_times_is_answered_and_never_diverted(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let dv = fresh_key();
    let holder = hold_version_lock(&w.url, dv).await;
    let worker = w.start_calculation(w.config());
    let body = vraag_for(dv);
    let asked = ask(&mut w.s, &body).await;
    // Five times: the session doing the worker's work waits on the lock, and is killed.
    let mut killed = Vec::new();
    for _ in 0..5 {
        let pid = lock_waiter(&w.s, &killed).await;
        let ok: bool = w.s.client().query_one("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap().get(0);
        assert!(ok, "{name}");
        killed.push(pid);
    }
    // The sixth try waits on the lock too: five failures did not divert the message.
    lock_waiter(&w.s, &killed).await;
    assert_eq!(w.count("SELECT count(*) FROM sbworker.dead_letter").await, 0, "{name}");
    let (attempts, transient): (i32, i32) = {
        let r =
            w.s.client()
                .query_one("SELECT attempts, transient_failures FROM sbworker.message_attempt", &[])
                .await
                .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        (attempts, transient),
        (1, 5),
        "{name}: the current attempt counts; the five killed ones were given back"
    );
    drop(holder);
    answered_correctly_and_all_clean(&mut w.s, asked, &body).await;
    assert!(worker.metric(&q_metric("sbworker_transient_failures_total")) >= 5.0, "{name}");
    assert_eq!(worker.metric(&q_metric("sbworker_messages_dead_lettered_total")), 0.0, "{name}");
    assert_eq!(worker.shutdown().await, RunOutcome::Drained, "{name}");
}

async fn every_connection_cut_is_reopened_and_work_goes_on(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let worker = w.start_calculation(w.config());
    ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    collect(&mut w.s, 1).await;
    // Cut every other session of the database: the worker's readers (waiting in
    // RECEIVE), their listeners, the supervisor's monitor, this test's listener.
    let killed = w
        .count(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await;
    assert!(killed >= 2, "{name}: killed {killed}");
    let mut s = PgSession::open(&w.url).await.unwrap();
    let h = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    let got = collect(&mut s, 1).await;
    assert_eq!((got[0].conversation_handle, got[0].message_type.as_str()), (h, message_types::ANTWOORD), "{name}");
    assert_eq!(worker.shutdown().await, RunOutcome::Drained, "{name}");
}

async fn a_message_that_keeps_failing_is_diverted_and_the_queue_stays_enabled(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let worker = w.start(w.config(), Arc::new(Poisoned));
    let mut body = vraag_body(Uuid::new_v4());
    body.extend_from_slice(b"<!-- poison -->");
    let bad = ask(&mut w.s, &body).await;
    let good = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    let got = collect(&mut w.s, 3).await;
    let of = |h: Uuid| got.iter().filter(|m| m.conversation_handle == h).collect::<Vec<_>>();
    let (for_bad, for_good) = (of(bad), of(good));
    assert_eq!(
        for_good.iter().map(|m| m.message_type.as_str()).collect::<Vec<_>>(),
        [message_types::ANTWOORD],
        "{name}"
    );
    assert_eq!(
        for_bad.iter().map(|m| m.message_type.as_str()).collect::<Vec<_>>(),
        [system::ERROR, message_types::FOUT],
        "{name}: the Error first, before the Fout sent ahead of it"
    );
    // The Fout names the diversion and the handler's error; the Error end carries the
    // same text under the diversion's number.
    let fout = decode_fout(&for_bad[1].body, &Limits::default()).unwrap();
    assert!(fout.error_message.contains("diverted after 3 failed attempts"), "{name}: {}", fout.error_message);
    assert!(fout.error_message.contains("choked on poison"), "{name}: {}", fout.error_message);
    let (code, text) = error_body(&for_bad[0].body);
    assert_eq!((code, text.as_str()), (DIVERTED, fout.error_message.as_str()), "{name}");
    // The dead letter: the attempts, the reason, the body byte for byte.
    let row =
        w.s.client().query_one("SELECT attempts, reason, message_body FROM sbworker.dead_letter", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 3, "{name}");
    assert!(row.get::<_, String>(1).contains("choked on poison"), "{name}");
    assert_eq!(row.get::<_, Vec<u8>>(2), body, "{name}: the message is kept byte for byte");
    end_all(&mut w.s, [bad, good]).await;
    the_end_state_is_clean(&w.s, 1).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_messages_dead_lettered_total")), 1.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_groups_retried_total")), 3.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_requests_answered_total")), 1.0, "{name}");
}

async fn when_diverting_fails_too_the_message_is_still_set_aside_before_the_broker_disables_the_queue(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    // Where an operator keeps the broker's poison detection on (allowed by configuration),
    // the worker still diverts within its four rollbacks.
    w.s.client()
        .batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', p_poison_handling => true)"))
        .await
        .unwrap();
    let worker = w.start(w.config(), Arc::new(PoisonedTwice));
    let h = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    wait_until("the message is set aside", || async {
        w.count("SELECT count(*) FROM sbworker.dead_letter").await == 1
    })
    .await;
    let m = worker.finish().await;
    // Three failures, one failed diversion, then the minimal one: four rollbacks, one
    // below the broker's limit.
    let attempts: i32 = w.s.client().query_one("SELECT attempts FROM sbworker.dead_letter", &[]).await.unwrap().get(0);
    assert_eq!(attempts, 4, "{name}");
    assert_eq!(w.count("SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "{name}: the queue stays enabled");
    assert_eq!(w.count("SELECT count(*) FROM sb.message").await, 0, "{name}");
    // No reply could be sent: the conversation stays open for an operator.
    let state: String =
        w.s.client().query_one("SELECT state FROM sb.endpoint WHERE handle = $1", &[&h]).await.unwrap().get(0);
    assert_eq!(state, "CO", "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_groups_retried_total")), 4.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_messages_dead_lettered_total")), 1.0, "{name}");
}

async fn a_disabled_queue_stops_its_readers_while_other_queues_go_on(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    // A second calculation queue and service next to the first, which is disabled.
    w.s.client()
        .batch_execute(&format!(
            "SELECT sb.create_queue('reken_q2'); SELECT sb.create_service('/Reken2', 'reken_q2', ARRAY['{CONTRACT}']);
             SELECT sb.alter_queue('reken_q2', p_poison_handling => false);
             SELECT sb.alter_queue('{REKEN_QUEUE}', false);"
        ))
        .await
        .unwrap();
    let mut cfg = w.config();
    cfg.worker.disabled_recheck_ms = 100;
    cfg.worker.scale_interval_ms = 50;
    let q2 = cfg.queues[REKEN_QUEUE].clone();
    cfg.queues.insert("reken_q2".into(), q2);
    let worker = w.start_calculation(cfg);
    let stuck = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    w.s.begin().await.unwrap();
    let h2 = w.s.begin_dialog(DATA_SERVICE, "/Reken2", CONTRACT, None, None).await.unwrap();
    w.s.send(h2, message_types::VRAAG, Some(&vraag_body(Uuid::new_v4()))).await.unwrap();
    w.s.commit().await.unwrap();
    let got = collect(&mut w.s, 1).await;
    assert_eq!(got[0].conversation_handle, h2, "{name}: the enabled queue is served");
    wait_until("the disabled queue shows as such", || async {
        worker.metric(&q_metric("sbworker_queue_enabled")) == 0.0
            && worker.metrics.readiness().is_err_and(|e| e.contains(&format!("{REKEN_QUEUE}: Disabled")))
    })
    .await;
    assert_eq!(w.count(&format!("SELECT count(*) FROM sb.message WHERE queue = '{REKEN_QUEUE}'")).await, 1, "{name}");
    // Enabled again: the re-check notices and readers serve it.
    w.s.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', true)")).await.unwrap();
    let got = collect(&mut w.s, 1).await;
    assert_eq!(got[0].conversation_handle, stuck, "{name}");
    end_all(&mut w.s, [stuck, h2]).await;
    the_end_state_is_clean(&w.s, 0).await;
    assert_eq!(worker.shutdown().await, RunOutcome::Drained, "{name}");
}

async fn readers_scale_up_under_a_backlog_and_back_down_when_idle(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    for _ in 0..12 {
        ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    }
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let mut cfg = w.config();
    cfg.worker.scale_interval_ms = 100;
    cfg.worker.idle_exit_ms = 300;
    let q = cfg.queues.get_mut(REKEN_QUEUE).unwrap();
    (q.min_readers, q.max_readers, q.batch, q.wait_ms) = (1, 3, 1, 100);
    let worker = w.start(cfg, Arc::new(Held { entered: entered_tx, release: release.clone() }));
    // Each reader holds a group: with a backlog and all busy, readers are added.
    for _ in 0..3 {
        tokio::time::timeout(std::time::Duration::from_secs(60), entered.recv()).await.expect("a reader").unwrap();
    }
    assert_eq!(worker.metric(&q_metric("sbworker_readers")), 3.0, "{name}");
    assert_eq!(worker.metric(&q_metric("sbworker_readers_busy")), 3.0, "{name}");
    release.add_permits(100);
    collect(&mut w.s, 12).await;
    wait_until("idle readers leave down to the minimum", || async {
        worker.metric(&q_metric("sbworker_readers")) == 1.0
    })
    .await;
    assert_eq!(worker.shutdown().await, RunOutcome::Drained, "{name}");
}

async fn sigterm_lets_the_group_in_flight_commit_and_exits_zero(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let dir = TempDir::new("sigterm");
    let mut p = Worker::start(&dir, &w.process_config("[hooks]\npause_before_commit = 1", 4));
    let h = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    p.wait_for("test hook: paused before commit").await;
    // Stop while the group is inside its transaction, answer sent but not committed.
    p.signal(libc::SIGTERM);
    let (code, log) = p.exit().await;
    assert_eq!(code, Some(0), "{name}: {log}");
    assert!(log.contains("every group in flight was committed"), "{name}: {log}");
    let got = collect(&mut w.s, 1).await;
    assert_eq!((got[0].message_type.as_str(), got[0].conversation_handle), (message_types::ANTWOORD, h), "{name}");
    // Nothing left for a next worker, no attempt open.
    assert_eq!(w.count(&format!("SELECT count(*) FROM sb.message WHERE queue = '{REKEN_QUEUE}'")).await, 0, "{name}");
    assert_eq!(w.count("SELECT count(*) FROM sbworker.message_attempt").await, 0, "{name}");
}

async fn sigkill_in_the_middle_of_a_group_loses_nothing(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let dir = TempDir::new("sigkill");
    let mut handles = Vec::new();
    for _ in 0..6 {
        handles.push(ask(&mut w.s, &vraag_body(Uuid::new_v4())).await);
    }
    // One reader: the paused group is the only one in flight when the worker is killed
    // (with more, another reader may be inside a group of its own at that moment).
    let mut p = Worker::start(&dir, &w.process_config("[hooks]\npause_before_commit = 1", 1));
    p.wait_for("test hook: paused before commit").await;
    p.signal(libc::SIGKILL);
    assert_eq!(p.exit().await.0, None, "{name}: killed by the signal");
    // The killed transaction's attempt was counted before its handler ran.
    assert_eq!(w.count("SELECT count(*) FROM sbworker.message_attempt WHERE attempts = 1").await, 1, "{name}");
    let mut p = Worker::start(&dir, &w.process_config("", 4));
    let got = collect(&mut w.s, handles.len()).await;
    let mut answered: Vec<Uuid> = got.iter().map(|m| m.conversation_handle).collect();
    answered.sort();
    handles.sort();
    assert_eq!(answered, handles, "{name}: every request answered");
    assert!(got.iter().all(|m| m.message_type == message_types::ANTWOORD), "{name}");
    p.wait_for("worker started").await;
    end_all(&mut w.s, handles).await;
    // Exactly once: nothing more on either queue, no attempts left, nothing diverted.
    the_end_state_is_clean(&w.s, 0).await;
    p.signal(libc::SIGTERM);
    let (code, log) = p.exit().await;
    assert_eq!(code, Some(0), "{name}: {log}");
}

/// The calculation queue of `cfg` taking up to `groups` groups per transaction, with
/// one reader and a window no test run reaches.
fn batched(mut cfg: Config, groups: u32) -> Config {
    let q = cfg.queues.get_mut(REKEN_QUEUE).unwrap();
    (q.groups_per_transaction, q.transaction_window_ms, q.max_readers) = (groups, 10_000, 1);
    cfg
}

async fn several_waiting_groups_are_committed_in_one_transaction_up_to_the_bound(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let mut handles = Vec::new();
    for _ in 0..7 {
        handles.push(ask(&mut w.s, &vraag_body(Uuid::new_v4())).await);
    }
    // All seven wait before the one reader starts: 3 + 3 + 1.
    let worker = w.start_calculation(batched(w.config(), 3));
    let got = collect(&mut w.s, handles.len()).await;
    assert!(got.iter().all(|m| m.message_type == message_types::ANTWOORD), "{name}");
    let mut answered: Vec<Uuid> = got.iter().map(|m| m.conversation_handle).collect();
    answered.sort();
    handles.sort();
    assert_eq!(answered, handles, "{name}: every request answered once");
    end_all(&mut w.s, handles).await;
    the_end_state_is_clean(&w.s, 0).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_transactions_committed_total")), 3.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_requests_answered_total")), 7.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_groups_given_back_total")), 0.0, "{name}");
}

async fn a_group_failing_beside_others_is_retried_alone_and_their_attempts_are_given_back(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let mut poison = vraag_body(Uuid::new_v4());
    poison.extend_from_slice(b"<!-- poison -->");
    let first = ask(&mut w.s, &vraag_body(Uuid::new_v4())).await;
    let bad = ask(&mut w.s, &poison).await;
    let mut good = vec![first];
    for _ in 0..2 {
        good.push(ask(&mut w.s, &vraag_body(Uuid::new_v4())).await);
    }
    let first_key: (Uuid, i64) = {
        let r =
            w.s.client()
                .query_one("SELECT handle, seq FROM sb.message WHERE queue = $1 ORDER BY id LIMIT 1", &[&REKEN_QUEUE])
                .await
                .unwrap();
        (r.get(0), r.get(1))
    };
    // The first transaction takes the first group, then fails on the poisoned one. The
    // poisoned group is tried alone until it is diverted, and that COMMIT pauses.
    let mut cfg = batched(w.config(), 4);
    cfg.hooks.pause_before_commit = 1;
    let worker = w.start(cfg, Arc::new(Poisoned));
    wait_until("the poisoned message's diversion is counted", || async {
        w.count("SELECT count(*) FROM sbworker.message_attempt WHERE attempts = 4 AND failures = 3").await == 1
    })
    .await;
    // The first group was rolled back with it, and its attempt given back: not one
    // failure on it.
    let row =
        w.s.client()
            .query_one(
                "SELECT attempts, failures, transient_failures, last_transient_error FROM sbworker.message_attempt \
             WHERE conversation_handle = $1 AND message_sequence_number = $2",
                &[&first_key.0, &first_key.1],
            )
            .await
            .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i32>(1), row.get::<_, i32>(2)), (0, 0, 1), "{name}");
    let why: String = row.get(3);
    assert!(why.contains("rolled back with another group") && why.contains("choked on poison"), "{name}: {why}");
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_groups_given_back_total")), 1.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_messages_dead_lettered_total")), 1.0, "{name}");
    // A second worker answers the rest, several groups to a transaction again.
    let worker = w.start(batched(w.config(), 4), Arc::new(Poisoned));
    let got = collect(&mut w.s, 5).await;
    let of = |h: Uuid| {
        got.iter().filter(|m| m.conversation_handle == h).map(|m| m.message_type.as_str()).collect::<Vec<_>>()
    };
    assert_eq!(of(bad), [system::ERROR, message_types::FOUT], "{name}");
    for h in &good {
        assert_eq!(of(*h), [message_types::ANTWOORD], "{name}");
    }
    let fout = decode_fout(
        &got.iter().find(|m| m.conversation_handle == bad && m.message_type == message_types::FOUT).unwrap().body,
        &Limits::default(),
    )
    .unwrap();
    assert!(fout.error_message.contains("diverted after 3 failed attempts"), "{name}: {}", fout.error_message);
    good.push(bad);
    end_all(&mut w.s, good).await;
    the_end_state_is_clean(&w.s, 1).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_transactions_committed_total")), 1.0, "{name}: the three in one");
}

async fn a_group_in_flight_when_a_worker_died_is_never_joined_by_others(kind: Kind) {
    // Where the group a dead worker left comes in the transaction: third (met after two
    // others: the transaction rolls back, gives every attempt back and takes it alone,
    // then the two others together), or first (taken alone, then the two others).
    for (at, commits, given_back) in [(2, 2.0, 2.0), (0, 2.0, 0.0)] {
        let mut w = World::new(kind).await;
        let name = w.name();
        let mut handles = Vec::new();
        for _ in 0..3 {
            handles.push(ask(&mut w.s, &vraag_body(Uuid::new_v4())).await);
        }
        // That request's message as a worker that died while handling it left it: one
        // attempt counted, no failure noted.
        w.s.client()
            .execute(
                "INSERT INTO sbworker.message_attempt (conversation_handle, message_sequence_number, queue, attempts) \
                 SELECT handle, seq, queue, 1 FROM sb.message WHERE queue = $1 ORDER BY id OFFSET $2 LIMIT 1",
                &[&REKEN_QUEUE, &(at as i64)],
            )
            .await
            .unwrap();
        let worker = w.start_calculation(batched(w.config(), 3));
        let got = collect(&mut w.s, handles.len()).await;
        assert!(got.iter().all(|m| m.message_type == message_types::ANTWOORD), "{name}");
        end_all(&mut w.s, handles).await;
        the_end_state_is_clean(&w.s, 0).await;
        let m = worker.finish().await;
        let metric = |n: &str| metric_in(&m, &q_metric(n));
        assert_eq!(metric("sbworker_transactions_committed_total"), commits, "{name}: at {at}");
        assert_eq!(metric("sbworker_groups_given_back_total"), given_back, "{name}: at {at}");
        assert_eq!(metric("sbworker_requests_answered_total"), 3.0, "{name}: at {at}");
        assert_eq!(metric("sbworker_transient_failures_total"), 0.0, "{name}: at {at}: nobody's failure");
    }
}

/// Fails the first attempt at a request containing "flaky" as a deadlock would (the
/// environment's fault); the rest is the calculation's.
struct FlakyOnce(std::sync::atomic::AtomicBool);

impl<S: PayrollStore> Handler<S> for FlakyOnce {
    fn handle<'a>(&'a self, s: &'a mut S, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            if msgs.iter().any(|m| String::from_utf8_lossy(&m.body).contains("flaky"))
                && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                return Err(HandlerError::Broker(sbworker::broker::BrokerError {
                    kind: sbworker::broker::ErrorKind::Retryable,
                    number: 1205,
                    message: "a deadlock, made up by the test".into(),
                }));
            }
            Handler::<S>::handle(&*calculation_handler(), s, msgs).await
        })
    }

    fn divert_reply(&self, m: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        Handler::<S>::divert_reply(&*calculation_handler(), m, reason)
    }
}

async fn a_group_retried_after_a_failure_is_taken_alone(kind: Kind) {
    let mut w = World::new(kind).await;
    let name = w.name();
    let mut flaky = vraag_body(Uuid::new_v4());
    flaky.extend_from_slice(b"<!-- flaky -->");
    let mut handles = vec![ask(&mut w.s, &flaky).await];
    for _ in 0..2 {
        handles.push(ask(&mut w.s, &vraag_body(Uuid::new_v4())).await);
    }
    // The first group fails alone (the transaction holds nothing else yet), is retried
    // alone, and the other two are taken together.
    let worker = w.start(batched(w.config(), 3), Arc::new(FlakyOnce(Default::default())));
    let got = collect(&mut w.s, handles.len()).await;
    assert!(got.iter().all(|m| m.message_type == message_types::ANTWOORD), "{name}");
    end_all(&mut w.s, handles).await;
    the_end_state_is_clean(&w.s, 0).await;
    let m = worker.finish().await;
    assert_eq!(metric_in(&m, &q_metric("sbworker_transient_failures_total")), 1.0, "{name}");
    assert_eq!(metric_in(&m, &q_metric("sbworker_transactions_committed_total")), 2.0, "{name}");
}

// Each scenario as a test on each back end.
on_every_back_end!(
    answers_each_request_and_ends_its_side_with_the_answer,
    a_malformed_vraag_gets_a_fout_naming_the_problem_and_an_error_end,
    an_error_from_the_initiator_ends_our_side_without_an_answer,
    a_message_behind_its_dialogs_error_is_handled_before_the_error_ends_the_dialog,
    an_unknown_message_type_is_a_contract_breach_ended_with_an_error,
    a_real_deadlock_is_retried_as_the_environments_fault_and_answered,
    a_lock_held_past_many_lock_timeouts_is_waited_out_and_never_diverted,
    a_session_killed_while_it_waits_on_a_lock_five_times_is_answered_and_never_diverted,
    every_connection_cut_is_reopened_and_work_goes_on,
    a_message_that_keeps_failing_is_diverted_and_the_queue_stays_enabled,
    when_diverting_fails_too_the_message_is_still_set_aside_before_the_broker_disables_the_queue,
    a_disabled_queue_stops_its_readers_while_other_queues_go_on,
    readers_scale_up_under_a_backlog_and_back_down_when_idle,
    sigterm_lets_the_group_in_flight_commit_and_exits_zero,
    sigkill_in_the_middle_of_a_group_loses_nothing,
    several_waiting_groups_are_committed_in_one_transaction_up_to_the_bound,
    a_group_failing_beside_others_is_retried_alone_and_their_attempts_are_given_back,
    a_group_in_flight_when_a_worker_died_is_never_joined_by_others,
    a_group_retried_after_a_failure_is_taken_alone,
);
