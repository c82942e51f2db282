//! `sbworker selftest --mssql … --deep`: for the first contact with a real SQL Server,
//! everything the T-SQL does, on the selftest's scratch key, each step one line of the
//! report with what it proved or what failed and where to look. The scratch roster is
//! edited by `Rekenserver.selftest` (as the owner; 'wijzig' a planner's edit, 'verlies' a
//! DBA's `END CONVERSATION … WITH CLEANUP`); the requests are answered by this binary's
//! own handlers over the transport, as a worker would; recompute, export, evidence and
//! the sweep run as their commands do, over the `admin` connection (a login with the
//! housekeeping and payroll roles, or the owner). Whatever happens, the scratch key is
//! removed at the end.
//!
//! It needs the queues to itself (it checks they are empty first): run it before the
//! workers start, or with them stopped and the queues drained.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::mssql::{queues, step};
use super::{Failure, Report, SCRATCH_DV, SCRATCH_PERIODE};
use crate::broker::mssql::{self, Connection, MssqlTransport, Tds};
use crate::contract::Limits;
use crate::handlers::{calculation, collector};
use crate::handoff::export::Mode;
use crate::handoff::{evidence, mssql as handoff, recompute, sweep};
use crate::transport::{BrokerError, Session, Transport};
use crate::worker::Handler;

/// The planner's contract (priority 5); a recompute's dialogs use the recompute
/// contract (priority 3: 01_service_broker.sql).
const PLANNER_CONTRACT: &str = "/Rekenserver/LoonfactorBerekening/DataContract";

/// How long a step waits for its requests to be answered and stored.
const SETTLE: Duration = Duration::from_secs(60);

/// The longest a receive of a held group may take before the step fails (the transport
/// bounds it to a second).
const HELD_GROUP_LIMIT: Duration = Duration::from_secs(10);

fn failure(detail: impl Into<String>, e: &BrokerError) -> Failure {
    Failure::broker(detail, e)
}

/// What the steps share: the admin's connection, the worker's transport and handlers.
struct Deep {
    admin: Tds,
    transport: MssqlTransport,
    calculation: calculation::Calculation,
    collector: collector::Collector,
    tables: Arc<crate::engine::Tables>,
}

/// Runs the deep steps after the checks of [`super::mssql::run`] passed; `emulator`:
/// the server is sbworker's emulator (said in each step's line).
pub async fn run(report: &mut Report, conn: &str, admin: &str, emulator: bool) {
    let deep = match open(conn, admin).await {
        Ok(d) => d,
        Err(f) => return report.fail("deep: start", f),
    };
    let mut deep = deep;
    if let Err(f) = queues_empty(&mut deep.admin).await {
        return report.fail("deep: start", f);
    }
    if let Err(e) = step(&mut deep.admin, "begin").await {
        return report.fail("deep: start", failure("Rekenserver.selftest 'begin' (the scratch roster)", &e));
    }
    let on = if emulator { " (on the emulator: the statements' shapes, not SQL Server's behaviour)" } else { "" };
    report.pass("deep: start", format!("the queues are empty; the scratch key is written{on}"));
    let outcome = steps(&mut deep, report).await;
    let cleaned = step(&mut deep.admin, "einde").await;
    if let Err((name, f)) = outcome {
        report.fail(name, f);
    }
    match cleaned {
        Ok(_) => report.pass("deep: cleanup", "the scratch key, its results, evidence and dialogs are removed"),
        Err(e) => report.fail("deep: cleanup", failure("Rekenserver.selftest 'einde'", &e)),
    }
}

async fn open(conn: &str, admin: &str) -> Result<Deep, Failure> {
    let c = Connection::parse(admin).map_err(|e| Failure::new(format!("the admin connection string: {e}")))?;
    let admin = mssql::connect(&c).await.map_err(|e| {
        failure(format!("cannot log in as the admin ({})", c.user), &e)
            .fix("give --admin the connection string of a login with the housekeeping and payroll roles (or the owner)")
    })?;
    let transport = MssqlTransport::new(conn).map_err(|e| Failure::new(format!("the connection string: {e}")))?;
    let tables =
        Arc::new(crate::engine::Tables::built_in().map_err(|e| Failure::new(format!("the rate tables: {e}")))?);
    Ok(Deep {
        admin,
        transport,
        calculation: calculation::Calculation::new(tables.clone(), Limits::default()),
        collector: collector::Collector::new(Limits::default()),
        tables,
    })
}

async fn queues_empty(admin: &mut Tds) -> Result<(), Failure> {
    for q in queues() {
        let rows = admin
            .query(crate::sql::statements::mssql_selftest::QUEUE.sql, &[&q.as_str()])
            .await
            .map_err(mssql::error_of)
            .map_err(|e| failure(format!("sbworker.queue_state {q}"), &e))?
            .into_first_result()
            .await
            .map_err(|e| failure(format!("sbworker.queue_state {q}"), &mssql::error_of(e)))?;
        let waiting = rows.first().and_then(|r| r.try_get::<i64, _>(1).ok().flatten()).unwrap_or(0);
        if waiting > 0 {
            return Err(Failure::new(format!("{waiting} messages wait on {q}")).fix(
                "--deep answers its scratch requests itself and needs the queues to itself: run it before the \
                 workers start, or stop them and let the queues drain first",
            ));
        }
    }
    Ok(())
}

type StepResult = Result<(), (&'static str, Failure)>;

async fn steps(d: &mut Deep, report: &mut Report) -> StepResult {
    // The roster trigger's Vraag, answered and stored.
    let name = "deep: roster edit answered";
    let v1 = d.settle_newest(name).await?;
    report.pass(name, format!("the trigger's Vraag (version {v1}) was answered and stored"));

    // Export at most once.
    let name = "deep: export once";
    let rows = d.claim(name, Mode::Once).await?;
    if rows.is_empty() || rows.iter().any(|r| r.versie != v1 || r.vervangt_versie.is_some()) {
        return Err((name, Failure::new(format!("the claim took {rows:?}, not version {v1} as a first export"))));
    }
    report.pass(name, format!("Rekenserver.export_claim took version {v1} ({} factor rows), committed", rows.len()));

    // Recompute: a dry run counts the key, a run sends its Vraag.
    let name = "deep: recompute dry run";
    match d.recompute(name, true).await? {
        recompute::Outcome::Counted { keys: 1, .. } => {
            report.pass(name, "Rekenserver.herbereken_sleutels counted the key")
        }
        other => return Err((name, Failure::new(format!("expected one key counted, got {other:?}")))),
    }
    let name = "deep: recompute";
    match d.recompute(name, false).await? {
        recompute::Outcome::Ran { sent: 1, .. } => {}
        other => return Err((name, Failure::new(format!("expected one Vraag sent, got {other:?}")))),
    }
    let v2 = d.settle_newest(name).await?;
    report.pass(name, format!("Rekenserver.herbereken sent version {v2}; answered and stored"));

    // The same figures are not exported again; a real change is a correction of what
    // payroll received (version 1, not the recompute's).
    let name = "deep: same figures not exported again";
    let rows = d.claim(name, Mode::Once).await?;
    if !rows.is_empty() {
        return Err((
            name,
            Failure::new(format!("version {v2} has version {v1}'s figures, yet the claim took {rows:?}")),
        ));
    }
    report.pass(name, format!("version {v2} has version {v1}'s figures: the claim took nothing"));
    let name = "deep: correction names what payroll received";
    d.edit(name).await?;
    let v3 = d.settle_newest(name).await?;
    let rows = d.claim(name, Mode::Lease { seconds: 60.0 }).await?;
    if rows.is_empty() || rows.iter().any(|r| r.versie != v3 || r.vervangt_versie != Some(v1)) {
        return Err((
            name,
            Failure::new(format!("expected version {v3} replacing version {v1} (what payroll has), got {rows:?}"))
                .fix("install this release's scripts: an older Rekenserver.sla_antwoord_op moves the export's version"),
        ));
    }
    report.pass(
        name,
        format!(
            "a planner's edit (version {v3}) was leased as the correction of version {v1}, not of {v2}; acknowledged"
        ),
    );

    // The evidence explains the versions.
    let name = "deep: explain";
    let versions = handoff::versions(&mut d.admin, SCRATCH_DV, SCRATCH_PERIODE)
        .await
        .map_err(|e| (name, failure("Rekenserver.bewijs", &e)))?;
    let explained = evidence::explain(&versions, None, &d.tables).map_err(|e| (name, Failure::new(e)))?;
    let changed = explained.previous.as_ref().map_or(0, |(_, diffs)| diffs.len());
    if versions.len() < 3
        || explained.version.versie != v3
        || changed == 0
        || explained.unexplained.is_some()
        || !explained.drift.is_empty()
    {
        return Err((
            name,
            Failure::new(format!(
                "{} versions; the latest {} with {changed} changes; unexplained: {:?}; drift: {:?}",
                versions.len(),
                explained.version.versie,
                explained.unexplained,
                explained.drift
            )),
        ));
    }
    report.pass(
        name,
        format!(
            "{} versions kept with their Vraag; version {v3} changes {changed} factor(s) from version {v2}, and its \
             Vraag computes the same again",
            versions.len()
        ),
    );

    // A request whose dialog a DBA ended WITH CLEANUP is found lost by the next sweep
    // and sent again.
    let name = "deep: lost dialog repaired by the sweep";
    d.edit(name).await?;
    let v4 = d.newest(name).await?.2;
    let lost =
        step(&mut d.admin, "verlies").await.map_err(|e| (name, failure("Rekenserver.selftest 'verlies'", &e)))?;
    let ended = lost.first().and_then(|rs| rs.first()).and_then(|r| r.get::<Uuid, _>(0));
    if ended.is_none() {
        return Err((name, Failure::new("the newest request had no calculation-side endpoint to end")));
    }
    let opts =
        sweep::Options { fuse: 500, batch: 100, retention_days: 60, evidence_retention_months: 84, delete_batch: 5000 };
    let mut found = 0;
    for _ in 0..3 {
        match handoff::sweep(&mut d.admin, opts).await.map_err(|e| (name, failure("Rekenserver.sweep", &e)))? {
            sweep::Outcome::Ran { lost, .. } => found += lost,
            sweep::Outcome::Skipped => {}
        }
        if found > 0 {
            break;
        }
    }
    if found == 0 {
        return Err((
            name,
            Failure::new("three sweeps did not find the request lost").fix("see Rekenserver.markeer_verloren"),
        ));
    }
    let stored = d.settle(name, v4).await?;
    report
        .pass(name, format!("the sweep marked the request lost ({found}) and sent it again; version {stored} stored"));

    // Planners first: a planner's edit sent after a recompute is received before it.
    let name = "deep: planner before recompute";
    match d.recompute(name, false).await? {
        recompute::Outcome::Ran { sent: 1, .. } => {}
        other => return Err((name, Failure::new(format!("expected one Vraag sent, got {other:?}")))),
    }
    d.edit(name).await?;
    let latest = d.newest(name).await?.2;
    let first = d.first_waiting(name).await?;
    if first != PLANNER_CONTRACT {
        return Err((
            name,
            Failure::new(format!("the first message received was on {first}, sent before the planner's"))
                .fix("check CREATE BROKER PRIORITY in 01_service_broker.sql and sys.conversation_endpoints.priority"),
        ));
    }
    let stored = d.settle(name, latest).await?;
    report.pass(name, format!("the planner's Vraag came first though sent second; version {stored} stored"));

    // A receive of a group another session holds comes back within its bound.
    let name = "deep: held group not waited for";
    d.edit(name).await?;
    let latest = d.newest(name).await?.2;
    let waited = d.held_group(name).await?;
    let stored = d.settle(name, latest).await?;
    let how = if waited < Duration::from_millis(500) {
        "at once (the server skips a held group)".to_owned()
    } else {
        format!("after {} ms (the server waited for the group's lock; the bound ended it)", waited.as_millis())
    };
    report.pass(
        name,
        format!("a retry's RECEIVE of a group another session held returned {how}; version {stored} stored"),
    );
    Ok(())
}

impl Deep {
    /// The scratch key's newest request: (initiator, target, version).
    async fn newest(&mut self, name: &'static str) -> Result<(Uuid, Option<Uuid>, i64), (&'static str, Failure)> {
        let sets = step(&mut self.admin, "dialogen")
            .await
            .map_err(|e| (name, failure("Rekenserver.selftest 'dialogen'", &e)))?;
        let row = sets.first().and_then(|rs| rs.first()).ok_or_else(|| {
            (
                name,
                Failure::new("no request of the scratch key in Rekenserver.berekening_log").fix("check 04_roster.sql"),
            )
        })?;
        let initiator = row.get::<Uuid, _>(0).ok_or_else(|| (name, Failure::new("a request without a dialog")))?;
        Ok((initiator, row.get::<Uuid, _>(1), row.get::<i64, _>(2).unwrap_or(0)))
    }

    /// The scratch key's stored version.
    async fn stored(&mut self, name: &'static str) -> Result<Option<i64>, (&'static str, Failure)> {
        let sets = step(&mut self.admin, "resultaat")
            .await
            .map_err(|e| (name, failure("Rekenserver.selftest 'resultaat'", &e)))?;
        Ok(sets.first().and_then(|rs| rs.first()).and_then(|r| r.get::<i64, _>(0)))
    }

    /// Answers the newest request and waits for it to be stored; its version.
    async fn settle_newest(&mut self, name: &'static str) -> Result<i64, (&'static str, Failure)> {
        let versie = self.newest(name).await?.2;
        self.settle(name, versie).await
    }

    /// Answers what waits on both queues, as the worker would, until version `versie`
    /// (or a later one) is stored; the stored version.
    async fn settle(&mut self, name: &'static str, versie: i64) -> Result<i64, (&'static str, Failure)> {
        let deadline = Instant::now() + SETTLE;
        loop {
            self.drain().await.map_err(|f| (name, f))?;
            if let Some(v) = self.stored(name).await?
                && v >= versie
            {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err((
                    name,
                    Failure::new(format!("version {versie} was not stored within {} s", SETTLE.as_secs())).fix(
                        "see Rekenserver.berekening_log for the request's outcome, and the collector's procedures",
                    ),
                ));
            }
        }
    }

    /// One pass over both queues: every group waiting is handled and committed, with the
    /// calculation's handler on the calculation queue and the collector's on the
    /// answers' queue.
    async fn drain(&self) -> Result<(), Failure> {
        let [reken, data] = queues();
        let mut session =
            self.transport.open().await.map_err(|e| failure("opening a worker session over the transport", &e))?;
        for queue in [reken.as_str(), data.as_str()] {
            loop {
                session.begin().await.map_err(|e| failure("BEGIN TRANSACTION", &e))?;
                let messages = match session.receive(queue, 100, None, Duration::from_millis(500)).await {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = session.rollback().await;
                        return Err(failure(format!("RECEIVE from {queue}"), &e));
                    }
                };
                if messages.is_empty() {
                    session.commit().await.map_err(|e| failure("COMMIT", &e))?;
                    break;
                }
                let handled = if queue == reken {
                    self.calculation.handle(&mut session, &messages).await
                } else {
                    Handler::<crate::broker::mssql::MssqlSession>::handle(&self.collector, &mut session, &messages)
                        .await
                };
                match handled {
                    Ok(h) if h.faulted > 0 => {
                        let _ = session.rollback().await;
                        return Err(Failure::new(format!(
                            "a message on {queue} came to a Fout (see Rekenserver.berekening_log)"
                        )));
                    }
                    Ok(_) => session.commit().await.map_err(|e| failure("COMMIT", &e))?,
                    Err(e) => {
                        let _ = session.rollback().await;
                        return Err(Failure::new(format!("handling a message from {queue}: {e}")));
                    }
                }
            }
        }
        Ok(())
    }

    /// A planner's edit of the scratch roster.
    async fn edit(&mut self, name: &'static str) -> Result<(), (&'static str, Failure)> {
        step(&mut self.admin, "wijzig").await.map_err(|e| (name, failure("Rekenserver.selftest 'wijzig'", &e)))?;
        Ok(())
    }

    /// One export claim of the scratch period, committed (a lease acknowledged).
    async fn claim(
        &mut self,
        name: &'static str,
        mode: Mode,
    ) -> Result<Vec<crate::handoff::export::Row>, (&'static str, Failure)> {
        let at = |what: &'static str| move |e: BrokerError| (name, failure(what, &e));
        handoff::begin(&mut self.admin).await.map_err(at("BEGIN TRANSACTION"))?;
        let batch = match handoff::claim(&mut self.admin, SCRATCH_PERIODE, mode).await {
            Ok(b) => b,
            Err(e) => {
                let _ = handoff::rollback(&mut self.admin).await;
                return Err((name, failure("Rekenserver.export_claim", &e)));
            }
        };
        handoff::commit(&mut self.admin).await.map_err(at("COMMIT"))?;
        if matches!(mode, Mode::Lease { .. }) && !batch.rows.is_empty() {
            let acked = handoff::ack(&mut self.admin, batch.id).await.map_err(at("Rekenserver.export_ack"))?;
            if acked != 1 {
                return Err((name, Failure::new(format!("the acknowledgement marked {acked} results, not 1"))));
            }
        }
        Ok(batch.rows)
    }

    /// `sbworker recompute` of the scratch key alone.
    async fn recompute(
        &mut self,
        name: &'static str,
        dry_run: bool,
    ) -> Result<recompute::Outcome, (&'static str, Failure)> {
        let sel = recompute::Selection { keys: vec![(SCRATCH_DV, SCRATCH_PERIODE)], ..Default::default() };
        let opts = recompute::Options { batch: 100, fuse: 10, dry_run };
        recompute::run(&mut self.admin, &sel, opts, |_, _| {}).await.map_err(|e| (name, Failure::new(e.to_string())))
    }

    /// The contract of the first message a RECEIVE TOP (1) takes (given back).
    async fn first_waiting(&self, name: &'static str) -> Result<String, (&'static str, Failure)> {
        let [reken, _] = queues();
        let mut s = self.transport.open().await.map_err(|e| (name, failure("opening a session", &e)))?;
        s.begin().await.map_err(|e| (name, failure("BEGIN TRANSACTION", &e)))?;
        let got = s.receive(&reken, 1, None, Duration::from_secs(5)).await;
        let _ = s.rollback().await;
        let got = got.map_err(|e| (name, failure("RECEIVE TOP (1)", &e)))?;
        got.first().map(|m| m.contract.clone()).ok_or_else(|| (name, Failure::new("nothing waited on the queue")))
    }

    /// Session A holds the newest request's group; session B receives that group as a
    /// retry does. How long B took; it must come back empty.
    async fn held_group(&self, name: &'static str) -> Result<Duration, (&'static str, Failure)> {
        let [reken, _] = queues();
        let open = |what| move |e: BrokerError| (name, failure(what, &e));
        let mut a = self.transport.open().await.map_err(open("opening session A"))?;
        let mut b = self.transport.open().await.map_err(open("opening session B"))?;
        a.begin().await.map_err(open("BEGIN TRANSACTION (A)"))?;
        let held = a.receive(&reken, 100, None, Duration::from_secs(5)).await;
        let Some(group) = held.as_ref().ok().and_then(|m| m.first()).map(|m| m.conversation_group_id) else {
            let _ = a.rollback().await;
            return Err((name, Failure::new("session A found nothing to hold")));
        };
        b.begin().await.map_err(open("BEGIN TRANSACTION (B)"))?;
        let started = Instant::now();
        let got = tokio::time::timeout(HELD_GROUP_LIMIT, b.receive(&reken, 100, Some(group), Duration::ZERO)).await;
        let waited = started.elapsed();
        let _ = b.rollback().await;
        let _ = a.rollback().await;
        match got {
            Err(_) => Err((
                name,
                Failure::new(format!("the receive waited more than {} s for the group", HELD_GROUP_LIMIT.as_secs()))
                    .fix("SET LOCK_TIMEOUT is not taking effect: see receive_group in broker/mssql/statements/session.sql"),
            )),
            Ok(Err(e)) => Err((name, failure("RECEIVE … WHERE conversation_group_id", &e))),
            Ok(Ok(m)) if !m.is_empty() => Err((name, Failure::new("session B took a group session A held"))),
            Ok(Ok(_)) => Ok(waited),
        }
    }
}
