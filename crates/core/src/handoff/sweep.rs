//! `sbworker sweep`: sends a Vraag for every key whose roster version is newer than its
//! stored result and that has no calculation in flight (after a bulk import with
//! sending switched off, a lost request, or a request diverted or answered with an
//! internal Fout: a repair, at most three times per version), oldest change first.
//! First it ends the dialogs past their LIFETIME (the collector records the broker's
//! error) and marks the requests whose dialog no longer exists as lost, so that no key
//! stays "in flight" for good. Guarded like seed
//! 000's run: a session advisory lock taken without waiting (an overlapping run logs
//! itself as skipped and exits), a fuse on the keys per run (a warning when reached),
//! sends committed in batches, and a run log with retention applied in batches, to the
//! worker's dead letters as well.

use tokio_postgres::Client;

use super::stmt;

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Most keys sent per run.
    pub fuse: i64,
    /// Keys per committed transaction.
    pub batch: usize,
    /// Run-log rows and dead letters older than this are deleted.
    pub retention_days: i32,
    /// Stored results' evidence older than this is deleted (the latest version of each
    /// key excepted).
    pub evidence_retention_months: i32,
    /// Rows deleted per statement.
    pub delete_batch: i64,
}

impl From<&crate::config::SweepConfig> for Options {
    fn from(c: &crate::config::SweepConfig) -> Self {
        Self {
            fuse: c.fuse,
            batch: c.batch as usize,
            retention_days: c.retention_days,
            evidence_retention_months: c.evidence_retention_months,
            delete_batch: c.delete_batch,
        }
    }
}

impl Options {
    /// The option that is out of range and why (a batch of 0 would never end; a
    /// retention of 0 days would delete the run's own log rows), as (name, problem).
    pub fn check(&self) -> Result<(), (&'static str, &'static str)> {
        if self.fuse < 1 {
            return Err(("fuse", "must be 1 or more (keys sent at most per run)"));
        }
        if self.batch < 1 {
            return Err(("batch", "must be 1 or more (keys sent per transaction)"));
        }
        if self.retention_days < 1 {
            return Err((
                "retention_days",
                "must be 1 or more (days the run log, dead letters and answered requests are kept)",
            ));
        }
        if self.evidence_retention_months < 1 {
            return Err(("evidence_retention_months", "must be 1 or more (months stored results' evidence is kept)"));
        }
        if self.delete_batch < 1 {
            return Err(("delete_batch", "must be 1 or more (rows deleted per statement)"));
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Self::from(&crate::config::SweepConfig::default())
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Another run held the lock: nothing was done.
    Skipped,
    Ran {
        /// Dialogs ended by their LIFETIME in this run.
        expired: i64,
        /// Requests found without their dialog (cleaned up, a broker reset), marked lost.
        lost: i64,
        candidates: i64,
        sent: i64,
        /// Of the keys sent, those sent again because their latest version failed by the
        /// environment's fault (diverted, or an internal Fout).
        repaired: i64,
        /// The fuse stopped the run short: more keys wait for the next one.
        fuse_reached: bool,
        deleted_log_rows: i64,
        deleted_dead_letters: i64,
        /// Evidence rows of stored results past their retention.
        deleted_evidence: i64,
        /// Log rows of requests answered before the retention (each key's current Fouts
        /// and the requests in flight stay).
        deleted_requests: i64,
    },
}

#[derive(Debug, thiserror::Error)]
#[error("sweep step {step} failed: {source}")]
pub struct SweepError {
    pub step: &'static str,
    #[source]
    pub source: tokio_postgres::Error,
}

fn at(step: &'static str) -> impl Fn(tokio_postgres::Error) -> SweepError {
    move |source| SweepError { step, source }
}

async fn log_start(c: &Client, run: Option<i64>, step: &str) -> Result<i64, tokio_postgres::Error> {
    Ok(c.query_one(stmt::LOG_START.sql, &[&run, &step]).await?.get(0))
}

async fn log_end(
    c: &Client,
    id: i64,
    counts: (Option<i32>, Option<i32>, Option<i32>),
    text: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    c.execute(stmt::LOG_END.sql, &[&id, &counts.0, &counts.1, &counts.2, &text]).await?;
    Ok(())
}

fn clamp(n: i64) -> Option<i32> {
    Some(i32::try_from(n).unwrap_or(i32::MAX))
}

/// One run. Use a connection of its own: the lock belongs to the session, and it is
/// released at the end (or when the connection closes).
pub async fn run(client: &mut Client, opts: Options) -> Result<Outcome, SweepError> {
    let run_id = log_start(client, None, "run").await.map_err(at("log"))?;
    let locked: bool = client.query_one(stmt::TRY_LOCK.sql, &[]).await.map_err(at("lock"))?.get(0);
    if !locked {
        log_end(client, run_id, (None, None, None), Some("skipped: a previous run still holds the lock"))
            .await
            .map_err(at("log"))?;
        return Ok(Outcome::Skipped);
    }
    let result = steps(client, run_id, opts).await;
    let text = match &result {
        Ok(Outcome::Ran { fuse_reached: true, .. }) => Some(format!("warning: fuse of {} keys reached", opts.fuse)),
        Ok(_) => None,
        Err(e) => {
            Some(format!("error: {e}: {}", e.source.as_db_error().map_or(String::new(), |d| d.message().to_owned())))
        }
    };
    let counts = match &result {
        Ok(Outcome::Ran {
            candidates,
            sent,
            deleted_log_rows,
            deleted_dead_letters,
            deleted_evidence,
            deleted_requests,
            ..
        }) => (
            clamp(*candidates),
            clamp(*sent),
            clamp(deleted_log_rows + deleted_dead_letters + deleted_evidence + deleted_requests),
        ),
        _ => (None, None, None),
    };
    // Whatever happened, the run row is completed and the lock released.
    let logged = log_end(client, run_id, counts, text.as_deref()).await;
    let unlocked = client.query_one(stmt::UNLOCK.sql, &[]).await;
    let outcome = result?;
    logged.map_err(at("log"))?;
    unlocked.map_err(at("unlock"))?;
    Ok(outcome)
}

async fn steps(client: &mut Client, run_id: i64, opts: Options) -> Result<Outcome, SweepError> {
    // Sweep: stale keys, oldest first, at most the fuse; sent in committed batches.
    let step = log_start(client, Some(run_id), "sweep").await.map_err(at("log"))?;
    // Lost requests first, so that their keys are among the stale ones.
    let expired: i32 = client.query_one(stmt::EXPIRE_DIALOGS.sql, &[]).await.map_err(at("sweep"))?.get(0);
    let lost: i32 = client.query_one(stmt::MARK_LOST.sql, &[]).await.map_err(at("sweep"))?.get(0);
    let found = client.query(stmt::CANDIDATES.sql, &[&(opts.fuse + 1)]).await.map_err(at("sweep"))?;
    let fuse_reached = found.len() as i64 > opts.fuse;
    let taken = &found[..found.len().min(opts.fuse.max(0) as usize)];
    let keys: Vec<(i32, i32)> = taken.iter().map(|r| (r.get(0), r.get(1))).collect();
    let repaired = taken.iter().filter(|r| r.get::<_, bool>(2)).count() as i64;
    let mut sent = 0i64;
    let mut failure = None;
    for chunk in keys.chunks(opts.batch.max(1)) {
        // In key order within the batch, as a recompute locks them.
        let mut chunk = chunk.to_vec();
        chunk.sort_unstable();
        let (dvs, periods): (Vec<i32>, Vec<i32>) = chunk.into_iter().unzip();
        let attempt = async {
            let tx = client.transaction().await?;
            let n: i64 = tx.query_one(stmt::SEND_KEYS.sql, &[&dvs, &periods]).await?.get(0);
            tx.commit().await?;
            Ok::<i64, tokio_postgres::Error>(n)
        };
        match attempt.await {
            Ok(n) => sent += n,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let warning =
        fuse_reached.then(|| format!("warning: fuse of {} keys reached; the rest waits for the next run", opts.fuse));
    let repairs = (repaired > 0).then(|| {
        format!(
            "repair: {repaired} keys sent again, their latest version having failed by a diversion or an internal error"
        )
    });
    let losses = (expired > 0 || lost > 0).then(|| {
        format!("lost dialogs: {expired} ended by their lifetime, {lost} requests without their dialog marked lost")
    });
    let text = match &failure {
        Some(e) => Some(format!("error: {}", e.as_db_error().map_or(e.to_string(), |d| d.message().to_owned()))),
        None => {
            let unsendable = keys.len() as i64 - sent;
            let unsendable = (unsendable > 0).then(|| {
                format!(
                    "{unsendable} keys not sent: no longer a key, or their Vraag cannot be built \
                     (rekenserver.onverzendbaar says why)"
                )
            });
            [warning, repairs, losses, unsendable].into_iter().flatten().reduce(|a, b| format!("{a}; {b}"))
        }
    };
    log_end(client, step, (clamp(keys.len() as i64), clamp(sent), None), text.as_deref()).await.map_err(at("log"))?;
    if let Some(e) = failure {
        return Err(SweepError { step: "sweep", source: e });
    }

    // Retention: the run log, the dead letters, the stored results' evidence and the
    // answered requests' log rows, in batches.
    let step = log_start(client, Some(run_id), "retentie").await.map_err(at("log"))?;
    let mut deleted = [0i64; 4];
    for (i, (statement, age)) in [
        (stmt::DELETE_RUN_LOG, opts.retention_days),
        (stmt::DELETE_DEAD_LETTERS, opts.retention_days),
        (stmt::DELETE_EVIDENCE, opts.evidence_retention_months),
        (stmt::DELETE_REQUESTS, opts.retention_days),
    ]
    .into_iter()
    .enumerate()
    {
        loop {
            let n: i64 =
                client.query_one(statement.sql, &[&age, &opts.delete_batch]).await.map_err(at("retentie"))?.get(0);
            deleted[i] += n;
            if n < opts.delete_batch {
                break;
            }
        }
    }
    log_end(client, step, (None, None, clamp(deleted.iter().sum())), None).await.map_err(at("log"))?;
    Ok(Outcome::Ran {
        expired: i64::from(expired),
        lost: i64::from(lost),
        candidates: keys.len() as i64,
        sent,
        repaired,
        fuse_reached,
        deleted_log_rows: deleted[0],
        deleted_dead_letters: deleted[1],
        deleted_evidence: deleted[2],
        deleted_requests: deleted[3],
    })
}
