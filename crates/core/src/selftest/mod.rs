//! `sbworker selftest`: the first command after an install, on either back end. The
//! checks run in order, one line each (PASS, FAIL or SKIP, with the server's error
//! number and text), and stop at the first failure with what to do about it:
//! connectivity and TLS; the permissions the worker needs, by name; the broker (enabled,
//! compatibility level, the queues enabled with activation and poison detection off);
//! the SET options of the installed modules (SQL Server); the install's version stamp;
//! then one real round trip on a scratch key (a roster edit fires the trigger, the Vraag
//! is received, computed and answered, the collector stores the Antwoord, export can see
//! it), cleaned up afterwards whatever happened. The round trip answers with this
//! binary's own handlers over the transport, unless a running worker takes the request
//! first, which proves as much.

pub mod deep;
pub mod mssql;
pub mod postgres;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use crate::contract::Limits;
use crate::handlers::calculation;
use crate::handlers::collector;
use crate::transport::PayrollStore;
use crate::transport::Transport;
use crate::worker::Handler;

/// The scratch key of the round trip: a dienstverband (and CAO) id and a period id no
/// real roster uses. A period of its own (December 2099) keeps it out of real exports.
pub const SCRATCH_DV: i32 = -1_000_001;
pub const SCRATCH_PERIODE: i32 = -1_000_001;

/// How long the round trip waits for the stored result.
const ROUND_TRIP_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// The server's error, when one was the cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_number: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_text: Option<String>,
    /// What to do about a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Every check run, in order; the last one failed when any did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub backend: &'static str,
    pub passed: bool,
    pub checks: Vec<Check>,
}

impl Report {
    fn new(backend: &'static str) -> Self {
        Self { backend, passed: true, checks: Vec::new() }
    }

    fn pass(&mut self, name: &'static str, detail: impl Into<String>) {
        self.push(name, Status::Pass, detail.into());
    }

    fn skip(&mut self, name: &'static str, detail: impl Into<String>) {
        self.push(name, Status::Skip, detail.into());
    }

    fn push(&mut self, name: &'static str, status: Status, detail: String) {
        self.checks.push(Check { name, status, detail, error_number: None, error_text: None, fix: None });
    }

    /// Records a failure; the caller stops there.
    fn fail(&mut self, name: &'static str, failure: Failure) {
        self.passed = false;
        self.checks.push(Check {
            name,
            status: Status::Fail,
            detail: failure.detail,
            error_number: failure.error.as_ref().map(|e| e.0),
            error_text: failure.error.map(|e| e.1),
            fix: failure.fix,
        });
    }

    /// The report as lines for a terminal or a log (`colour`: ANSI colours).
    pub fn text(&self, colour: bool) -> String {
        let paint = |s: Status| {
            let (word, code) = match s {
                Status::Pass => ("PASS", "32"),
                Status::Fail => ("FAIL", "31"),
                Status::Skip => ("SKIP", "33"),
            };
            if colour { format!("\x1b[{code}m{word}\x1b[0m") } else { word.to_owned() }
        };
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!("{}  {:width$}  {}\n", paint(c.status), c.name, c.detail));
            if let Some(text) = &c.error_text {
                let n = c.error_number.map(|n| format!("{n}: ")).unwrap_or_default();
                out.push_str(&format!("      {:width$}  server error {n}{text}\n", ""));
            }
            if let Some(fix) = &c.fix {
                out.push_str(&format!("      {:width$}  what to do: {fix}\n", ""));
            }
        }
        out.push_str(if self.passed {
            "selftest passed: this database is ready for sbworker\n"
        } else {
            "selftest FAILED: fix the first failure above and run it again\n"
        });
        out
    }

    /// The report as one JSON object (`backend`, `passed`, `checks`: name, status,
    /// detail, and error_number, error_text and fix when there are any).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Why a check failed.
#[derive(Debug, Clone, Default)]
pub struct Failure {
    pub detail: String,
    /// The server's error number and text.
    pub error: Option<(i64, String)>,
    pub fix: Option<String>,
}

impl Failure {
    pub fn new(detail: impl Into<String>) -> Self {
        Self { detail: detail.into(), error: None, fix: None }
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    pub fn error(mut self, number: i64, text: impl Into<String>) -> Self {
        self.error = Some((number, text.into()));
        self
    }

    fn broker(detail: impl Into<String>, e: &crate::transport::BrokerError) -> Self {
        Self::new(detail).error(i64::from(e.number), e.message.clone())
    }
}

/// Who answered the scratch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredBy {
    /// This selftest, with the worker's own handlers over the transport.
    Selftest,
    /// A worker already running took it first.
    RunningWorker,
}

/// What a round trip that passed did, for its line in the report.
pub fn round_trip_detail(by: AnsweredBy, versie: i64, factors: i64, started: std::time::Instant) -> String {
    format!(
        "a roster edit was answered ({}) and stored (version {versie}, {factors} wage factors), and export can claim it; \
         {} ms; cleaned up",
        match by {
            AnsweredBy::Selftest => "by this selftest with the worker's handlers",
            AnsweredBy::RunningWorker => "by a running worker",
        },
        started.elapsed().as_millis()
    )
}

/// The worker's handlers as the selftest uses them: the calculation's (with the tables
/// given) and the collector's.
pub(crate) struct ScratchHandlers {
    calculation: calculation::Calculation,
    collector: collector::Collector,
}

/// What one conversation's turn found.
pub(crate) enum Took {
    /// Its messages were handled and committed.
    Handled,
    /// Nothing waited for it.
    Nothing,
    /// The conversation is gone (ended already).
    Gone(crate::transport::BrokerError),
}

impl ScratchHandlers {
    pub(crate) fn new(tables: Arc<crate::engine::Tables>) -> Self {
        Self {
            calculation: calculation::Calculation::new(tables, Limits::default()),
            collector: collector::Collector::new(Limits::default()),
        }
    }

    /// One transaction on `session`, as a worker's: receives what waits for conversation
    /// `handle` on `queue`, handles it with the calculation's handler (`calculate`) or
    /// the collector's, and commits. A Fout is a failure (the transaction rolled back);
    /// `what` names the message in failures.
    pub(crate) async fn answer<S: PayrollStore>(
        &self,
        session: &mut S,
        queue: &str,
        handle: Uuid,
        calculate: bool,
        what: &str,
    ) -> Result<Took, Failure> {
        session.begin().await.map_err(|e| Failure::broker("BEGIN TRANSACTION", &e))?;
        let messages = match session.receive_conversation(queue, handle).await {
            Ok(m) => m,
            Err(e) => {
                let _ = session.rollback().await;
                if e.kind == crate::broker::ErrorKind::ConversationNotFound {
                    return Ok(Took::Gone(e));
                }
                return Err(Failure::broker(format!("receiving {what} from {queue}"), &e));
            }
        };
        if messages.is_empty() {
            let _ = session.rollback().await;
            return Ok(Took::Nothing);
        }
        let handled = if calculate {
            Handler::<S>::handle(&self.calculation, session, &messages).await
        } else {
            Handler::<S>::handle(&self.collector, session, &messages).await
        };
        match handled {
            Ok(h) if h.faulted > 0 => {
                let _ = session.rollback().await;
                Err(Failure::new(format!("{what} on {queue} was answered with a Fout (see the calculation log)")))
            }
            Ok(_) => {
                session.commit().await.map_err(|e| Failure::broker("COMMIT", &e))?;
                Ok(Took::Handled)
            }
            Err(e) => {
                let _ = session.rollback().await;
                Err(Failure::new(format!("handling {what} from {queue}: {e}")))
            }
        }
    }
}

/// Answers the scratch dialog over `transport` as the worker and its collector would:
/// receives the Vraag on the target's endpoint `target` of queue `reken_queue`,
/// computes and answers it (one transaction), then receives the Antwoord on the
/// initiator's endpoint `initiator` of `data_queue` and stores it (another). Either
/// side finding nothing means a running worker took it.
pub async fn answer_scratch<T>(
    transport: &T,
    queues: (&str, &str),
    target: Uuid,
    initiator: Uuid,
) -> Result<AnsweredBy, Failure>
where
    T: Transport,
    T::Session: PayrollStore,
{
    let (reken_queue, data_queue) = queues;
    let tables =
        Arc::new(crate::engine::Tables::built_in().map_err(|e| Failure::new(format!("the rate tables: {e}")))?);
    let handlers = ScratchHandlers::new(tables);
    let mut session =
        transport.open().await.map_err(|e| Failure::broker("opening a worker session over the transport", &e))?;
    let mut by = AnsweredBy::Selftest;
    for (queue, handle, what) in [(reken_queue, target, "the Vraag"), (data_queue, initiator, "the Antwoord")] {
        match handlers.answer(&mut session, queue, handle, queue == reken_queue, what).await? {
            Took::Handled => {}
            Took::Nothing => by = AnsweredBy::RunningWorker,
            Took::Gone(e) => return Err(Failure::broker(format!("receiving {what} from {queue}"), &e)),
        }
    }
    Ok(by)
}

/// Waits for the scratch key's stored result: the caller loops, reading the stored
/// version, until [`Wait::done`] says it has come or the wait has run out.
pub struct Wait {
    versie: i64,
    deadline: tokio::time::Instant,
}

impl Wait {
    pub fn new(versie: i64) -> Self {
        Self { versie, deadline: tokio::time::Instant::now() + ROUND_TRIP_WAIT }
    }

    /// `Ok(true)` once `stored` reaches the version, `Ok(false)` after a pause (read
    /// again), an error once the wait (30 s) has passed.
    pub async fn done(&self, stored: Option<i64>) -> Result<bool, Failure> {
        if stored.is_some_and(|v| v >= self.versie) {
            return Ok(true);
        }
        if tokio::time::Instant::now() > self.deadline {
            return Err(Failure::new(format!(
                "no result for the scratch key's version {} within {} s (stored: {stored:?})",
                self.versie,
                ROUND_TRIP_WAIT.as_secs()
            ))
            .fix(
                "check that a worker's collector serves the answers' queue and a worker's calculation the calculation \
                 queue (on a split install: on the other server, with the routes read: sbworker status there), and \
                 their logs",
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(false)
    }
}
