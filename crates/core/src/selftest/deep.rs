//! `sbworker selftest --mssql … --deep`: for the first contact with a real SQL Server,
//! everything the T-SQL does, on the selftest's scratch key, each step one line of the
//! report with what it proved or what failed and where to look. The scratch roster is
//! edited by `Rekenserver.selftest` (as the owner, called by the worker's login, as the
//! plain selftest does; 'wijzig' a planner's edit, 'verlies' a DBA's `END CONVERSATION
//! … WITH CLEANUP`); the scratch requests, and only they, are answered by this binary's
//! own handlers over the transport, as a worker would; recompute, export, evidence and
//! the sweep run as their commands do, over the `admin` connection (a login with the
//! housekeeping and payroll roles, or the owner). Whatever happens, the scratch key is
//! removed at the end.
//!
//! It needs the queues to itself: it checks that they are empty and that no worker is
//! alive first (run it before the workers start, or with them stopped).

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::mssql::{failure, queues, rows, step};
use super::{Failure, Report, SCRATCH_DV, SCRATCH_PERIODE, ScratchHandlers, Took};
use crate::broker::mssql::{self, Connection, MssqlSession, MssqlTransport, Tds};
use crate::handoff::export::Mode;
use crate::handoff::{evidence, mssql as handoff, recompute, sweep};
use crate::transport::{BrokerError, Message, Session, Transport};

/// The planner's contract (priority 5); a recompute's dialogs use the recompute
/// contract (priority 3: 01_service_broker.sql).
const PLANNER_CONTRACT: &str = "/Rekenserver/LoonfactorBerekening/DataContract";

/// How long a step waits for its requests to be answered and stored.
const SETTLE: Duration = Duration::from_secs(60);

/// The longest a receive of a held group may take before the step fails (the transport
/// bounds it to a second).
const HELD_GROUP_LIMIT: Duration = Duration::from_secs(10);

/// The sweep step's settings: the scheduled sweep's fuse and batch, and retentions so
/// long that it deletes nothing (the site's own settings are not known here).
const SWEEP: sweep::Options = sweep::Options {
    fuse: 500,
    batch: 100,
    retention_days: 36_500,
    evidence_retention_months: 1200,
    delete_batch: 5000,
};

/// What the steps share: the worker's connection (the scratch steps, as the plain
/// selftest calls them), the admin's (recompute, export, evidence, sweep), a worker
/// session over the transport and the worker's handlers.
struct Deep {
    worker: Tds,
    admin: Tds,
    transport: MssqlTransport,
    session: MssqlSession,
    handlers: ScratchHandlers,
    tables: Arc<crate::engine::Tables>,
}

/// Runs the deep steps after the checks of [`super::mssql::run`] passed; `emulator`:
/// the server is sbworker's emulator (said in the start line).
pub async fn run(report: &mut Report, conn: &str, admin: &str, emulator: bool) {
    let mut deep = match open(conn, admin).await {
        Ok(d) => d,
        Err(f) => return report.fail("deep: start", f),
    };
    if let Err(f) = deep.alone().await {
        return report.fail("deep: start", f);
    }
    if let Err(e) = step(&mut deep.worker, "begin").await {
        return report.fail("deep: start", failure("Rekenserver.selftest 'begin' (the scratch roster)", &e));
    }
    let on = if emulator { " (on the emulator: the statements' shapes, not SQL Server's behaviour)" } else { "" };
    report.pass("deep: start", format!("no worker alive, the queues empty; the scratch key is written{on}"));
    let outcome = steps(&mut deep, report).await;
    let cleaned = step(&mut deep.worker, "einde").await;
    if let Err((name, f)) = outcome {
        report.fail(name, f);
    }
    match cleaned {
        Ok(_) => report.pass("deep: cleanup", "the scratch key, its results, evidence and dialogs are removed"),
        Err(e) => report.fail("deep: cleanup", failure("Rekenserver.selftest 'einde'", &e)),
    }
}

async fn open(conn: &str, admin: &str) -> Result<Deep, Failure> {
    let login = |s: &str, who: &'static str, fix: &'static str| {
        let s = s.to_owned();
        async move {
            let c = Connection::parse(&s).map_err(|e| Failure::new(format!("the {who} connection string: {e}")))?;
            mssql::connect(&c)
                .await
                .map_err(|e| failure(format!("cannot log in as the {who} ({})", c.user), &e).fix(fix))
        }
    };
    let worker = login(conn, "worker", "give --mssql the worker's connection string").await?;
    let admin = login(
        admin,
        "admin",
        "give --admin the connection string of a login with the housekeeping and payroll roles (or the owner)",
    )
    .await?;
    let transport = MssqlTransport::new(conn).map_err(|e| Failure::new(format!("the connection string: {e}")))?;
    let session = transport.open().await.map_err(|e| failure("opening a worker session over the transport", &e))?;
    let tables =
        Arc::new(crate::engine::Tables::built_in().map_err(|e| Failure::new(format!("the rate tables: {e}")))?);
    Ok(Deep { worker, admin, transport, session, handlers: ScratchHandlers::new(tables.clone()), tables })
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
    d.recompute_one(name).await?;
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

    // Planners first: a planner's edit sent after a recompute is received before it.
    let name = "deep: planner before recompute";
    d.recompute_one(name).await?;
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
    let (_, target, latest) = d.newest(name).await?;
    let target = target.ok_or_else(|| (name, Failure::new("the newest request has no target endpoint")))?;
    let waited = d.held_group(name, target).await?;
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

    // A request whose dialog a DBA ended WITH CLEANUP is found lost by the next sweep
    // and sent again. Last: the sweep is the ordinary one (stale real keys may be sent
    // too, for the workers; it deletes nothing).
    let name = "deep: lost dialog repaired by the sweep";
    d.edit(name).await?;
    let (lost_dialog, _, v4) = d.newest(name).await?;
    d.lose(name).await?;
    let mut swept = None;
    for _ in 0..10 {
        match handoff::sweep(&mut d.admin, SWEEP).await.map_err(|e| (name, failure("Rekenserver.sweep", &e)))? {
            sweep::Outcome::Ran { lost, sent, .. } => {
                swept = Some((lost, sent));
                break;
            }
            // A scheduled sweep holds the lock: its run does the same.
            sweep::Outcome::Skipped => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    let (lost, sent) = swept.ok_or_else(|| (name, Failure::new("another sweep held the lock for 10 s")))?;
    let (resent, _, _) = d.newest(name).await?;
    if resent == lost_dialog {
        return Err((
            name,
            Failure::new(format!("the sweep marked {lost} requests lost and sent {sent}, but not the scratch key's"))
                .fix("see Rekenserver.markeer_verloren; with many stale keys the fuse (500) may have come first"),
        ));
    }
    let stored = d.settle(name, v4).await?;
    report.pass(
        name,
        format!("the sweep found the request lost and sent the key again on a new dialog; version {stored} stored"),
    );
    Ok(())
}

impl Deep {
    /// No worker alive and both queues empty: the steps need the queues to themselves.
    async fn alone(&mut self) -> Result<(), Failure> {
        let sets =
            step(&mut self.worker, "werkers").await.map_err(|e| failure("Rekenserver.selftest 'werkers'", &e))?;
        let alive = sets.first().and_then(|rs| rs.first()).and_then(|r| r.get::<i32, _>(0)).unwrap_or(0);
        if alive > 0 {
            return Err(Failure::new(format!("{alive} workers are alive (sbworker status lists them)")).fix(
                "--deep answers its scratch requests itself and needs the queues to itself: stop the workers first",
            ));
        }
        for q in queues() {
            let state = rows(&mut self.worker, crate::sql::statements::mssql_selftest::QUEUE, &[&q.as_str()])
                .await
                .map_err(|e| failure(format!("sbworker.queue_state {q}"), &e))?;
            let waiting = state.first().and_then(|r| r.try_get::<i64, _>(1).ok().flatten()).unwrap_or(0);
            if waiting > 0 {
                return Err(Failure::new(format!("{waiting} messages wait on {q}")).fix(
                    "start the workers to drain them, stop them, and run --deep again (it needs the queues to itself)",
                ));
            }
        }
        Ok(())
    }

    /// The scratch key's requests, newest first: (initiator, target, version).
    async fn requests(
        &mut self,
        name: &'static str,
    ) -> Result<Vec<(Uuid, Option<Uuid>, i64)>, (&'static str, Failure)> {
        let sets = step(&mut self.worker, "dialogen")
            .await
            .map_err(|e| (name, failure("Rekenserver.selftest 'dialogen'", &e)))?;
        Ok(sets
            .first()
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| Some((r.get::<Uuid, _>(0)?, r.get::<Uuid, _>(1), r.get::<i64, _>(2).unwrap_or(0))))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The scratch key's newest request.
    async fn newest(&mut self, name: &'static str) -> Result<(Uuid, Option<Uuid>, i64), (&'static str, Failure)> {
        self.requests(name).await?.into_iter().next().ok_or_else(|| {
            (
                name,
                Failure::new("no request of the scratch key in Rekenserver.berekening_log").fix("check 04_roster.sql"),
            )
        })
    }

    /// The scratch key's stored version.
    async fn stored(&mut self, name: &'static str) -> Result<Option<i64>, (&'static str, Failure)> {
        let sets = step(&mut self.worker, "resultaat")
            .await
            .map_err(|e| (name, failure("Rekenserver.selftest 'resultaat'", &e)))?;
        Ok(sets.first().and_then(|rs| rs.first()).and_then(|r| r.get::<i64, _>(0)))
    }

    /// Answers the newest request and waits for it to be stored; its version.
    async fn settle_newest(&mut self, name: &'static str) -> Result<i64, (&'static str, Failure)> {
        let versie = self.newest(name).await?.2;
        self.settle(name, versie).await
    }

    /// Answers the scratch key's requests, as the worker would, until version `versie`
    /// (or a later one) is stored; the stored version.
    async fn settle(&mut self, name: &'static str, versie: i64) -> Result<i64, (&'static str, Failure)> {
        let deadline = Instant::now() + SETTLE;
        loop {
            let handled = self.answer(name).await?;
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
            if handled == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// One pass over the scratch key's conversations (no other): what waits for each
    /// target on the calculation queue, then for each initiator on the answers' queue,
    /// handled and committed. How many groups were handled.
    async fn answer(&mut self, name: &'static str) -> Result<usize, (&'static str, Failure)> {
        let [reken, data] = queues();
        let requests = self.requests(name).await?;
        let mut handled = 0;
        for (queue, handle) in requests
            .iter()
            .filter_map(|r| r.1.map(|t| (reken.as_str(), t)))
            .chain(requests.iter().map(|r| (data.as_str(), r.0)))
        {
            let calculate = queue == reken;
            let what = if calculate { "a scratch Vraag" } else { "a scratch Antwoord" };
            // Gone: an answered request's dialog, ended already; nothing to do.
            match self.handlers.answer(&mut self.session, queue, handle, calculate, what).await {
                Ok(Took::Handled) => handled += 1,
                Ok(Took::Nothing | Took::Gone(_)) => {}
                Err(f) => return Err((name, f)),
            }
        }
        Ok(handled)
    }

    /// A planner's edit of the scratch roster.
    async fn edit(&mut self, name: &'static str) -> Result<(), (&'static str, Failure)> {
        step(&mut self.worker, "wijzig").await.map_err(|e| (name, failure("Rekenserver.selftest 'wijzig'", &e)))?;
        Ok(())
    }

    /// A DBA's `END CONVERSATION … WITH CLEANUP` of the newest request's target, once
    /// the message has arrived (its target endpoint exists).
    async fn lose(&mut self, name: &'static str) -> Result<Uuid, (&'static str, Failure)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let sets = step(&mut self.worker, "verlies")
                .await
                .map_err(|e| (name, failure("Rekenserver.selftest 'verlies'", &e)))?;
            if let Some(target) = sets.first().and_then(|rs| rs.first()).and_then(|r| r.get::<Uuid, _>(0)) {
                return Ok(target);
            }
            if Instant::now() > deadline {
                return Err((
                    name,
                    Failure::new("the newest request's target endpoint did not appear within 10 s")
                        .fix("see sys.transmission_queue (transmission_status) for the Vraag"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One export claim of the scratch period, committed (a lease acknowledged).
    async fn claim(
        &mut self,
        name: &'static str,
        mode: Mode,
    ) -> Result<Vec<crate::handoff::export::Row>, (&'static str, Failure)> {
        let at = |what: &'static str| move |e: BrokerError| (name, failure(what, &e));
        handoff::begin(&mut self.admin).await.map_err(at("BEGIN TRANSACTION"))?;
        let claimed = handoff::claim(&mut self.admin, SCRATCH_PERIODE, mode).await;
        let batch = match claimed {
            Ok(b) => b,
            Err(e) => {
                let _ = handoff::rollback(&mut self.admin).await;
                return Err((name, failure("Rekenserver.export_claim", &e)));
            }
        };
        if let Err(e) = handoff::commit(&mut self.admin).await {
            let _ = handoff::rollback(&mut self.admin).await;
            return Err((name, failure("COMMIT", &e)));
        }
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

    /// A recompute of the scratch key that sends its one Vraag.
    async fn recompute_one(&mut self, name: &'static str) -> Result<(), (&'static str, Failure)> {
        match self.recompute(name, false).await? {
            recompute::Outcome::Ran { sent: 1, .. } => Ok(()),
            other => Err((name, Failure::new(format!("expected one Vraag sent, got {other:?}")))),
        }
    }

    /// The contract of the first message a RECEIVE TOP (1) takes (given back), which
    /// must be one of the scratch key's.
    async fn first_waiting(&mut self, name: &'static str) -> Result<String, (&'static str, Failure)> {
        let [reken, _] = queues();
        let targets: Vec<Uuid> = self.requests(name).await?.iter().filter_map(|r| r.1).collect();
        let s = &mut self.session;
        s.begin().await.map_err(|e| (name, failure("BEGIN TRANSACTION", &e)))?;
        let got = s.receive(&reken, 1, None, Duration::from_secs(5)).await;
        let _ = s.rollback().await;
        let got: Vec<Message> = got.map_err(|e| (name, failure("RECEIVE TOP (1)", &e)))?;
        let first = got.first().ok_or_else(|| (name, Failure::new("nothing waited on the queue")))?;
        if !targets.contains(&first.conversation_handle) {
            return Err((name, Failure::new("another request came first (a planner's edit meanwhile?): run it again")));
        }
        Ok(first.contract.clone())
    }

    /// Session A holds the group of `target` (a receive of its conversation); session B
    /// receives that group as a retry does. How long B took; it must come back empty.
    async fn held_group(&self, name: &'static str, target: Uuid) -> Result<Duration, (&'static str, Failure)> {
        let [reken, _] = queues();
        let open = |what| move |e: BrokerError| (name, failure(what, &e));
        let mut a = self.transport.open().await.map_err(open("opening session A"))?;
        let mut b = self.transport.open().await.map_err(open("opening session B"))?;
        a.begin().await.map_err(open("BEGIN TRANSACTION (A)"))?;
        let held = match a.receive_conversation(&reken, target).await {
            Ok(m) => m,
            Err(e) => {
                let _ = a.rollback().await;
                return Err((name, failure("session A: RECEIVE … WHERE conversation_handle", &e)));
            }
        };
        let Some(group) = held.first().map(|m| m.conversation_group_id) else {
            let _ = a.rollback().await;
            return Err((name, Failure::new("session A found nothing of the newest request to hold")));
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
            Ok(Err(e)) => Err((name, failure("session B: RECEIVE … WHERE conversation_group_id", &e))),
            Ok(Ok(m)) if !m.is_empty() => Err((name, Failure::new("session B took a group session A held"))),
            Ok(Ok(_)) => Ok(waited),
        }
    }
}
