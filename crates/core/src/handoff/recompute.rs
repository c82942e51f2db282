//! `sbworker recompute` (both back ends): computes keys again after a change no roster edit
//! makes (new rate tables, a CAO change, a corrected period). The keys are chosen by
//! period, CAO, employee range or named one by one; each batch raises its keys' versions
//! and sends their Vraags in one short transaction, as a roster edit does, so latest wins
//! and the version claim hold as for any edit. One recompute at a time (a lock taken
//! without waiting), a fuse on the keys per run, progress after every batch, and a
//! run-log row (`stap = 'herberekening'`). The steps are written once, over a
//! [`Backend`]: PostgreSQL in [`super::postgres`], SQL Server in [`super::mssql`].

/// Which keys: every filter given must hold; `keys` names keys outright (then the
/// filters are not used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub periodes: Vec<i32>,
    pub cao: Option<String>,
    pub dienstverband_from: Option<i32>,
    pub dienstverband_to: Option<i32>,
    pub keys: Vec<(i32, i32)>,
    /// Start after this key (to go on where a run stopped at its fuse).
    pub after: Option<(i32, i32)>,
}

impl Selection {
    /// The selection that would recompute everything: refused unless asked for with
    /// `--all` (a whole installation's keys is never a default).
    pub fn is_everything(&self) -> bool {
        self.periodes.is_empty()
            && self.cao.is_none()
            && self.dienstverband_from.is_none()
            && self.dienstverband_to.is_none()
            && self.keys.is_empty()
    }
}

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Keys per committed transaction.
    pub batch: usize,
    /// Most keys recomputed per run.
    pub fuse: i64,
    /// Count the keys, change nothing.
    pub dry_run: bool,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Another recompute held the lock: nothing was done.
    Skipped,
    /// `--dry-run`: the keys that would be recomputed (at most the fuse, and whether
    /// more match).
    Counted { keys: i64, fuse_reached: bool },
    Ran {
        keys: i64,
        /// Vraags sent (a key whose Vraag cannot be built is raised but not sent).
        sent: i64,
        batches: i64,
        fuse_reached: bool,
        /// The last key recomputed (for `--after` when the fuse stopped the run).
        last: Option<(i32, i32)>,
    },
}

/// A failure of a database step.
pub type StepError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
#[error("recompute step {step} failed: {source}{}", last.map_or(String::new(), |(d, p)| format!(" (keys up to {d}:{p} were recomputed: go on with --after {d}:{p})")))]
pub struct RecomputeError {
    pub step: &'static str,
    #[source]
    pub source: StepError,
    /// The last key recomputed before the failure.
    pub last: Option<(i32, i32)>,
}

fn at<E: std::error::Error + Send + Sync + 'static>(step: &'static str) -> impl Fn(E) -> RecomputeError {
    move |source| RecomputeError { step, source: Box::new(source), last: None }
}

/// What a back end does for a recompute: the steps are the same on both.
#[allow(async_fn_in_trait)]
pub trait Backend {
    type Error: std::error::Error + Send + Sync + 'static;
    /// Takes the one-recompute lock without waiting and opens the run-log row: its id,
    /// or `None` when another recompute holds the lock.
    async fn begin(&mut self) -> Result<Option<i64>, Self::Error>;
    /// Writes the progress so far to the run-log row (keys recomputed, Vraags sent), for
    /// the web page's runs.
    async fn progress(&mut self, run: i64, keys: i64, sent: i64) -> Result<(), Self::Error>;
    /// Completes the run-log row and releases the lock.
    async fn end(&mut self, run: i64, keys: i64, sent: i64, text: Option<String>) -> Result<(), Self::Error>;
    /// The next page of keys after `after`, at most `n`.
    async fn page(
        &mut self,
        sel: &Selection,
        after: Option<(i32, i32)>,
        n: i64,
    ) -> Result<Vec<(i32, i32)>, Self::Error>;
    /// Recomputes `keys` in one committed transaction: the Vraags sent.
    async fn batch(&mut self, keys: &[(i32, i32)]) -> Result<i64, Self::Error>;
    /// A deadlock or serialization failure: the batch is taken again. (Of this back end:
    /// a statement an operator cancelled is not one.)
    fn transient(&self, e: &Self::Error) -> bool;
    /// The database's own message of an error, for the run log.
    fn message(e: &Self::Error) -> String;
}

/// One run; `progress` hears (keys done, Vraags sent) after every batch. Use a
/// connection of its own: the lock belongs to the session. A dry run counts without the
/// lock (it changes nothing).
pub async fn run<B: Backend>(
    db: &mut B,
    sel: &Selection,
    opts: Options,
    mut progress: impl FnMut(i64, i64),
) -> Result<Outcome, RecomputeError> {
    let batch = opts.batch.max(1) as i64;
    if opts.dry_run {
        let (mut keys, mut after) = (0i64, sel.after);
        loop {
            let got = db.page(sel, after, batch.min(opts.fuse.saturating_add(1) - keys)).await.map_err(at("select"))?;
            keys += got.len() as i64;
            if got.is_empty() || keys > opts.fuse {
                break;
            }
            after = got.last().copied();
        }
        return Ok(Outcome::Counted { keys: keys.min(opts.fuse), fuse_reached: keys > opts.fuse });
    }
    let Some(run_id) = db.begin().await.map_err(at("lock"))? else {
        return Ok(Outcome::Skipped);
    };
    let (mut keys, mut sent, mut batches, mut after) = (0i64, 0i64, 0i64, sel.after);
    let batch = batch.min(100_000);
    let mut fuse_reached = false;
    let mut failure: Option<(&'static str, B::Error)> = None;
    loop {
        let room = opts.fuse - keys;
        // One more than there is room for tells whether the fuse stopped the run.
        let got = match db.page(sel, after, batch.min(room.saturating_add(1))).await {
            Ok(g) => g,
            Err(e) => {
                failure = Some(("select", e));
                break;
            }
        };
        if got.is_empty() {
            break;
        }
        if got.len() as i64 > room {
            fuse_reached = true;
        }
        let take = &got[..got.len().min(room.max(0) as usize)];
        if take.is_empty() {
            break;
        }
        // Up to eight tries, with a growing pause between them: a batch that loses a
        // deadlock to a planner's commit, or gives way to a key a planner holds (it is
        // the victim by design: SQL Server's DEADLOCK_PRIORITY LOW, PostgreSQL's 200 ms
        // lock_timeout), is taken again once the planner is through.
        let mut pauses = backon::BackoffBuilder::build(
            backon::ExponentialBuilder::default()
                .with_min_delay(std::time::Duration::from_millis(100))
                .with_max_delay(std::time::Duration::from_secs(2))
                .with_jitter()
                .with_max_times(7),
        );
        let result = loop {
            match db.batch(take).await {
                Err(e) if db.transient(&e) => match pauses.next() {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => break Err(e),
                },
                other => break other,
            }
        };
        match result {
            Ok(n) => {
                keys += take.len() as i64;
                sent += n;
                batches += 1;
                progress(keys, sent);
                // Best effort: an install of the release before has no progress
                // statement (commands are upgraded first), and a recompute does not stop
                // for its progress line.
                let _ = db.progress(run_id, keys, sent).await;
            }
            Err(e) => {
                failure = Some(("recompute", e));
                break;
            }
        }
        after = take.last().copied();
        if fuse_reached {
            break;
        }
    }
    let text = match &failure {
        Some((_, e)) => Some(format!("error: {}", B::message(e))),
        None if fuse_reached => Some(format!(
            "warning: fuse of {} keys reached; the rest follows with --after {}",
            opts.fuse,
            after.map_or(String::new(), |(d, p)| format!("{d}:{p}"))
        )),
        None => None,
    };
    let ended = db.end(run_id, keys, sent, text).await;
    if let Some((step, source)) = failure {
        return Err(RecomputeError { step, source: Box::new(source), last: after });
    }
    ended.map_err(at("log"))?;
    Ok(Outcome::Ran { keys, sent, batches, fuse_reached, last: after })
}
