//! One reader: a session of its own and the loop begin → WAITFOR (RECEIVE) one group →
//! count the attempt (durably, outside the transaction) → handle, or divert a message
//! that failed too often → COMMIT. Any failure rolls the whole transaction back and is
//! noted with whose fault it was (docs/retries.md): the message's keeps its count and
//! the group is tried again after a backoff, one message at a time, so a bad message is
//! isolated from the rest of its group (an Error brings the rest of its dialog, which
//! its END would discard); the environment's (deadlock, lock timeout, lost
//! connection) is given back and the group waits, with a growing backoff capped at
//! `retry_max_delay_ms`, for as long as the fault lasts. An attempt whose worker died
//! leaves its count, so a message that kills the worker is diverted too.
//!
//! With `groups_per_transaction` above 1, one transaction goes on receiving waiting
//! groups (without waiting) after the first, and commits them together; a failure is
//! blamed on the group that failed, and the groups before it are given back
//! (docs/retries.md, "Several groups in one transaction").

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, Span, debug, error, field, info, info_span, warn};
use uuid::Uuid;

use super::handler::{Handled, HandlerError};
use super::{QueueCtx, Stop};
use crate::transport::{Attempt, DeadLetter, Fault, MessageKey, Session, Transport};
use crate::transport::{BrokerError, ErrorKind, Message, system};

/// Why a reader ended.
#[derive(Debug)]
pub(crate) enum ReaderExit {
    /// Stop was requested.
    Stopped,
    /// Idle for `idle_exit_ms` with more than the minimum running (already counted off).
    Idle,
    /// The queue is disabled.
    Disabled,
    /// Every reader slot the database allows is held (by this or other processes).
    NoSlot,
    /// The database's reader limit fell below this reader's slot.
    Capped,
}

/// A transaction failed: the group it is blamed on, and the groups handled before it
/// in the same transaction (given back: another group's failure never counts against
/// their messages).
struct Failure {
    /// The group the transaction is retried with.
    group: Uuid,
    /// The attempt that failed (highest count among the group's messages).
    attempt: i32,
    keys: Vec<MessageKey>,
    error: HandlerError,
    /// The attempt was counted before it failed (its note may give it back).
    counted: bool,
    /// Not the group's fault whatever the error: the attempt is given back (a
    /// transaction of several groups that cannot say which one failed).
    forgiven: bool,
    /// The group was in flight when a worker died before, and met beside others: it
    /// is taken again at once, alone (not a failure of anyone's).
    died_before: bool,
    /// The counted messages of the other groups of the transaction, given back.
    others: Vec<MessageKey>,
    /// How many groups those are.
    other_groups: u64,
    /// The transaction's registrations as unfinished, ended once the notes are written
    /// (or kept to be written): a shutdown that aborts the rollback gives them back.
    tokens: Vec<u64>,
    /// The transaction wrote no attempt row (it failed before the COMMIT's forgetting):
    /// the notes are written before the rollback, while its groups are still held, so
    /// that no other reader counts a message before its note is in.
    notes_first: bool,
}

impl Failure {
    fn new(group: Uuid, attempt: i32, keys: Vec<MessageKey>, error: HandlerError, counted: bool) -> Self {
        Self {
            group,
            attempt,
            keys,
            error,
            counted,
            forgiven: false,
            died_before: false,
            others: Vec::new(),
            other_groups: 0,
            tokens: Vec::new(),
            notes_first: true,
        }
    }

    /// Whose fault it was: the environment's (deadlock, lock timeout, lost connection,
    /// server shutdown, the other side ending the conversation meanwhile) or the
    /// message's (everything else).
    fn fault(&self) -> Fault {
        if self.forgiven || self.error.is_retryable() || self.error.is_closed_conversation() {
            Fault::Transient
        } else {
            Fault::Message
        }
    }
}

/// A failure note not yet written: the next session writes it before receiving, so a
/// transient failure is given back before the message is attempted again.
struct Note {
    keys: Vec<MessageKey>,
    error: String,
    fault: Fault,
}

/// Writes the notes in order; those not written stay in `notes`.
async fn write_notes<S: Session>(s: &mut S, notes: &mut Vec<Note>) -> Result<(), crate::transport::BrokerError> {
    while let Some(note) = notes.first() {
        s.note_failure(&note.keys, &note.error, note.fault).await?;
        notes.remove(0);
    }
    Ok(())
}

/// What a committed group did.
enum Done {
    Handled(Handled),
    Diverted(u32),
}

/// Sleeps for `d`; true if stop was requested meanwhile.
async fn sleep_or_stop(d: Duration, stop: &mut Stop) -> bool {
    tokio::select! {
        _ = stop.stopped() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// Opens a session, retrying with backoff until it works or stop is requested.
async fn connect<T: Transport>(ctx: &QueueCtx<T>, stop: &mut Stop) -> Option<T::Session> {
    let mut delays = ctx.reconnect.reconnects();
    loop {
        let opened = tokio::select! {
            _ = stop.stopped() => return None,
            s = ctx.transport.open() => s,
        };
        match opened {
            Ok(s) => return Some(s),
            Err(e) => {
                let d = delays.next().unwrap_or(ctx.reconnect.max_delay);
                warn!(retry_in_ms = d.as_millis() as u64, "cannot open a broker session: {e}");
                if sleep_or_stop(d, stop).await {
                    return None;
                }
            }
        }
    }
}

/// Keeps the reader within the database's limit on the queue's readers (its
/// MAX_QUEUE_READERS, across every worker process and host), read by the supervisor:
/// takes a slot when there is a limit and it holds none, gives it back when the limit is
/// gone, and says the reader must leave when every slot is held or the limit fell below
/// its own.
async fn reader_slot<T: Transport>(
    ctx: &QueueCtx<T>,
    s: &mut T::Session,
    slot: &mut Option<u32>,
) -> Result<Option<ReaderExit>, crate::transport::BrokerError> {
    let cap = ctx.db_cap.load(Ordering::SeqCst);
    match (cap, *slot) {
        (0, Some(n)) => {
            s.free_reader_slot(&ctx.name, n).await?;
            *slot = None;
        }
        (0, None) => {}
        (cap, Some(n)) if n >= cap => {
            s.free_reader_slot(&ctx.name, n).await?;
            *slot = None;
            info!(slot = n, limit = cap, "the database's reader limit fell below this reader's slot: it leaves");
            return Ok(Some(ReaderExit::Capped));
        }
        (_, Some(_)) => {}
        (cap, None) => match s.take_reader_slot(&ctx.name, cap).await? {
            Some(n) => {
                debug!(slot = n, limit = cap, "took a reader slot");
                *slot = Some(n);
            }
            None => {
                debug!(limit = cap, "every reader slot the database allows is held: this reader leaves");
                return Ok(Some(ReaderExit::NoSlot));
            }
        },
    }
    Ok(None)
}

/// What a reader's next RECEIVE takes, after what became of its last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Any group: a batch, waiting up to the queue's wait.
    Any,
    /// Any group, but only this many messages: a group retry that had to fall back to
    /// a plain RECEIVE takes what the retry would have (one at a time isolates a bad
    /// message), not a batch.
    AnyTaking(i32),
    /// The group that failed, again after `delay`, taking `max` messages.
    Retry { group: Uuid, delay: Duration, max: i32 },
}

/// Transient failures in a row, each growing its own backoff: of the group being
/// retried, and of RECEIVE itself.
#[derive(Debug, Default)]
struct Streaks {
    transient: u32,
    receive: u32,
}

/// When to take a group that failed again, and how many of its messages
/// (docs/retries.md): at once and whole when the other side ended a conversation
/// meanwhile (so its EndDialog or Error comes along); whole after a backoff that grows
/// with each transient failure in a row, capped, for as long as it takes; one message at
/// a time after the message's own failure, isolating the bad one (an Error with the rest
/// of its dialog: `rest_of_errored_dialogs`), after a backoff by its durable attempt
/// count.
fn retry_plan<T: Transport>(ctx: &QueueCtx<T>, f: &Failure, group: Uuid, streaks: &mut Streaks) -> (Duration, i32) {
    if f.died_before {
        return (Duration::ZERO, ctx.cfg.batch);
    }
    match f.fault() {
        _ if f.error.is_closed_conversation() => (Duration::ZERO, ctx.cfg.batch),
        Fault::Transient => {
            ctx.meters.transient_failures.inc();
            streaks.transient += 1;
            ctx.waits.begin(group);
            (ctx.retry.delay(streaks.transient), ctx.cfg.batch)
        }
        Fault::Message => {
            ctx.waits.end(group);
            (ctx.retry.delay(u32::try_from(f.attempt.max(1)).unwrap_or(1)), 1)
        }
    }
}

pub(crate) async fn read<T: Transport>(ctx: Arc<QueueCtx<T>>, id: u32, mut stop: Stop) -> ReaderExit {
    // A task of its own: the supervisor's span does not carry over, so name the queue.
    let span = info_span!("reader", queue = %ctx.name, reader = id);
    let mut pending: Vec<Note> = Vec::new();
    let exit = read_loop(&ctx, &mut stop, &mut pending).instrument(span).await;
    for n in pending {
        // Written by the worker once its readers are gone.
        ctx.unfinished.keep((n.keys, n.error, n.fault));
    }
    exit
}

async fn read_loop<T: Transport>(ctx: &QueueCtx<T>, stop: &mut Stop, pending: &mut Vec<Note>) -> ReaderExit {
    let idle_exit = ctx.settings.idle_exit;
    let mut session: Option<T::Session> = None;
    let mut next = Next::Any;
    let mut streaks = Streaks::default();
    let mut last_work = Instant::now();
    // The database's reader slot this reader holds on its session's connection (a new
    // connection holds none).
    let mut slot: Option<u32> = None;
    // Held one before its connection was lost: the old connection's slot may still be
    // held for a moment, so a new one is asked for a few times before giving up.
    let mut retake = 0u32;
    debug!("reader started");
    loop {
        if stop.is_stopped() {
            return ReaderExit::Stopped;
        }
        if session.is_none() {
            if slot.take().is_some() {
                retake = 5;
            }
            match connect(ctx, stop).await {
                Some(s) => session = Some(s),
                None => return ReaderExit::Stopped,
            }
        }
        let Some(s) = session.as_mut() else { continue };
        if !pending.is_empty() {
            // Written before anything is received again (and before the reader may leave
            // for want of a slot): a transient failure must be given back before its
            // message is counted once more.
            if let Err(e) = write_notes(s, pending).await {
                warn!("cannot record the last failure yet; reconnecting: {e}");
                session = None;
                streaks.receive += 1;
                if sleep_or_stop(ctx.retry.delay(streaks.receive), stop).await {
                    return ReaderExit::Stopped;
                }
                continue;
            }
        }
        match reader_slot(ctx, s, &mut slot).await {
            Ok(None) => retake = 0,
            Ok(Some(ReaderExit::NoSlot)) if retake > 0 => {
                retake -= 1;
                if sleep_or_stop(Duration::from_millis(200), stop).await {
                    return ReaderExit::Stopped;
                }
                continue;
            }
            Ok(Some(exit)) => return exit,
            Err(e) => {
                streaks.receive += 1;
                let delay = ctx.retry.delay(streaks.receive);
                warn!(retry_in_ms = delay.as_millis() as u64, "cannot take a reader slot; reconnecting: {e}");
                session = None;
                if sleep_or_stop(delay, stop).await {
                    return ReaderExit::Stopped;
                }
                continue;
            }
        }
        // A retry (or its fallback) is taken alone.
        let (max, group, wait, alone) = match std::mem::replace(&mut next, Next::Any) {
            Next::Retry { group, delay, max } => {
                if sleep_or_stop(delay, stop).await {
                    return ReaderExit::Stopped;
                }
                (max, Some(group), Duration::ZERO, true)
            }
            Next::AnyTaking(max) => (max, None, ctx.wait(), true),
            Next::Any => (ctx.cfg.batch, None, ctx.wait(), false),
        };
        if let Err(e) = s.begin().await {
            // A new connection, after a pause that grows with each failure in a row: a
            // server that refuses every BEGIN must not be met with a storm of logins.
            streaks.receive += 1;
            let delay = ctx.retry.delay(streaks.receive);
            warn!(
                failures_in_a_row = streaks.receive,
                retry_in_ms = delay.as_millis() as u64,
                "BEGIN failed; reconnecting: {e}"
            );
            session = None;
            // A retry keeps its place: taken on the new connection as planned (its own
            // pause is over), not as a batch that would end its isolation.
            if alone {
                next = match group {
                    Some(group) => Next::Retry { group, delay: Duration::ZERO, max },
                    None => Next::AnyTaking(max),
                };
            }
            if sleep_or_stop(delay, stop).await {
                return ReaderExit::Stopped;
            }
            continue;
        }
        let received = tokio::select! {
            biased;
            // Dropping the session closes it: the server rolls the transaction back.
            _ = stop.stopped() => return ReaderExit::Stopped,
            r = s.receive(&ctx.name, max, group, wait) => r,
        };
        let msgs = match received {
            Ok(m) => m,
            Err(e) if e.kind == ErrorKind::QueueDisabled => {
                let _ = s.rollback().await;
                return ReaderExit::Disabled;
            }
            Err(e) => {
                // Nothing was counted (no message came back): back off, growing with
                // each failure in a row, so a RECEIVE that keeps failing (a deadlock at
                // every try) does not spin through rollbacks.
                streaks.receive += 1;
                let delay = ctx.retry.delay(streaks.receive);
                warn!(
                    failures_in_a_row = streaks.receive,
                    retry_in_ms = delay.as_millis() as u64,
                    "RECEIVE failed: {e}"
                );
                if e.kind == ErrorKind::Connection || s.rollback().await.is_err() {
                    session = None;
                }
                // A group being retried is not asked for again: RECEIVE … WHERE
                // conversation_group_id = g errors once the group is gone (another reader
                // finished it; the RECEIVE page), and would fail for ever. The plain
                // RECEIVE finds the group again while it has messages, taking as many as
                // the retry would have.
                if group.is_some() {
                    next = Next::AnyTaking(max);
                }
                if sleep_or_stop(delay, stop).await {
                    return ReaderExit::Stopped;
                }
                continue;
            }
        };
        streaks.receive = 0;
        if msgs.is_empty() {
            if group.is_some() {
                // The group being retried is held by another reader (its wait goes on
                // there) or was answered elsewhere.
                streaks.transient = 0;
            }
            if s.commit().await.is_err() {
                session = None;
            }
            if group.is_none() && last_work.elapsed() >= idle_exit && ctx.try_leave() {
                debug!("idle: reader leaves");
                return ReaderExit::Idle;
            }
            continue;
        }
        last_work = Instant::now();
        let limit = if alone { 1 } else { ctx.groups_for_next() };
        let busy = ctx.busy.fetch_add(1, Ordering::SeqCst) + 1;
        ctx.meters.busy.set(busy as i64);
        let result = transaction(ctx, s, msgs, max, limit, stop).await;
        let busy = ctx.busy.fetch_sub(1, Ordering::SeqCst) - 1;
        ctx.meters.busy.set(busy as i64);
        match result {
            Ok(held) => {
                streaks.transient = 0;
                ctx.meters.committed.inc();
                for h in held {
                    let _enter = h.span.enter();
                    ctx.waits.end(h.group);
                    ctx.meters.processing.observe(h.started.elapsed().as_secs_f64());
                    count_committed(ctx, h.done);
                }
            }
            Err(f) => {
                ctx.meters.retried.inc();
                ctx.meters.given_back.inc_by(f.other_groups);
                let fault = f.fault();
                let disabled = roll_back(&mut session, &f, pending).await;
                f.tokens.iter().for_each(|t| ctx.unfinished.end(*t));
                let (delay, max) = retry_plan(ctx, &f, f.group, &mut streaks);
                warn!(
                    group = %f.group,
                    attempt = f.attempt,
                    transient = fault == Fault::Transient,
                    given_back = f.other_groups,
                    retry_in_ms = delay.as_millis() as u64,
                    "group rolled back: {}",
                    f.error
                );
                if disabled || f.error.is_queue_disabled() {
                    return ReaderExit::Disabled;
                }
                next = Next::Retry { group: f.group, delay, max };
            }
        }
    }
}

/// Counts what a committed group came to.
fn count_committed<T: Transport>(ctx: &QueueCtx<T>, done: Done) {
    match done {
        Done::Handled(h) => {
            ctx.meters.answered.inc_by(u64::from(h.answered));
            ctx.meters.faulted.inc_by(u64::from(h.faulted));
            ctx.meters.ended.inc_by(u64::from(h.ended));
            ctx.meters.superseded.inc_by(u64::from(h.superseded));
            debug!(answered = h.answered, faulted = h.faulted, ended = h.ended, "group committed");
        }
        Done::Diverted(n) => {
            ctx.meters.dead_lettered.inc_by(u64::from(n));
        }
    }
}

/// After a failed attempt: notes why (the failing group's attempt, and the other
/// groups' given back) on the session's side connection, and rolls back (a broken
/// connection is dropped instead, which rolls back on the server). The notes go first
/// when the transaction wrote no attempt row, so its groups are noted before any other
/// reader can receive them; a note that cannot be written yet stays `pending`, for the
/// next session to write before it receives. True when the rollback disabled the queue.
async fn roll_back<S: Session>(session: &mut Option<S>, f: &Failure, pending: &mut Vec<Note>) -> bool {
    let error = truncate(&f.error.to_string(), 3000);
    if f.counted {
        pending.push(Note { keys: f.keys.clone(), error: error.clone(), fault: f.fault() });
    }
    if !f.others.is_empty() {
        let error =
            truncate(&format!("rolled back with another group of the transaction (not counted): {error}"), 3000);
        pending.push(Note { keys: f.others.clone(), error, fault: Fault::Transient });
    }
    if f.notes_first {
        write_pending(session, pending).await;
    }
    let broken = f.error.is_connection();
    let mut disabled = false;
    if !broken && let Some(s) = session.as_mut() {
        match s.rollback().await {
            Ok(d) => disabled = d,
            Err(e) => {
                warn!("ROLLBACK failed: {e}");
                *session = None;
            }
        }
    }
    // The side connection may have outlived a broken working connection.
    write_pending(session, pending).await;
    if broken {
        *session = None;
    }
    disabled
}

/// Writes the pending notes on the session's side connection, if there is a session;
/// those it cannot write stay pending.
async fn write_pending<S: Session>(session: &mut Option<S>, pending: &mut Vec<Note>) {
    if !pending.is_empty()
        && let Some(s) = session.as_mut()
        && let Err(e) = write_notes(s, pending).await
    {
        warn!("cannot record the failure yet: {e}");
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect()
}

/// A group handled in the open transaction, waiting for its COMMIT.
struct Held {
    group: Uuid,
    keys: Vec<MessageKey>,
    /// The attempt rows the COMMIT deletes: the group's messages, and with a diversion
    /// those of its conversations received to be kept aside.
    forget: Vec<MessageKey>,
    attempt: i32,
    done: Done,
    /// Its registration as unfinished, ended once the transaction is over.
    token: u64,
    started: Instant,
    /// Its span (queue, group, attempt), for what is logged of it at the COMMIT.
    span: Span,
    /// An earlier attempt of its messages died with its worker: it is not joined by
    /// other groups (their messages would be counted should it kill this one too).
    died_before: bool,
}

/// One transaction: the received group handled, then, up to `limit` receives and the
/// queue's `transaction_window`, the next waiting groups received and handled in the
/// same transaction (Service Broker's batched commits); then their attempt rows deleted
/// and COMMIT. A failure rolls all of it back; the other groups are given back.
async fn transaction<S: Session, T: Transport<Session = S>>(
    ctx: &QueueCtx<T>,
    s: &mut S,
    first: Vec<Message>,
    asked: i32,
    limit: usize,
    stop: &mut Stop,
) -> Result<Vec<Held>, Failure> {
    let began = Instant::now();
    let mut held: Vec<Held> = Vec::new();
    let mut msgs = first;
    let mut asked = asked;
    let keys_of = |held: &[Held]| held.iter().flat_map(|h| h.keys.iter().copied()).collect::<Vec<_>>();
    let tokens_of = |held: &[Held]| held.iter().map(|h| h.token).collect::<Vec<_>>();
    loop {
        let group = msgs[0].conversation_group_id;
        let taken = msgs.len();
        ctx.meters.received.inc_by(taken as u64);
        if let Err(e) = rest_of_errored_dialogs(s, &ctx.name, &mut msgs, asked).await {
            // Nothing of this group is counted yet (as when counting fails).
            let keys = msgs.iter().map(MessageKey::of).collect();
            let mut f = Failure::new(group, 0, keys, e.into(), false);
            f.others = keys_of(&held);
            f.other_groups = held.len() as u64;
            f.tokens = tokens_of(&held);
            return Err(f);
        }
        asked = ctx.cfg.batch;
        ctx.meters.received.inc_by((msgs.len() - taken) as u64);
        let span = info_span!("group", group = %group, messages = msgs.len(), attempt = field::Empty);
        match process_group(ctx, s, &msgs, !held.is_empty()).instrument(span).await {
            Ok(h) => held.push(h),
            Err(mut f) => {
                f.others = keys_of(&held);
                f.other_groups = held.len() as u64;
                f.tokens.extend(tokens_of(&held));
                return Err(f);
            }
        }
        // A group received again (more messages than one RECEIVE takes, or new ones)
        // ends the transaction: it holds that group's messages in order.
        let again = held[..held.len() - 1].iter().any(|h| h.group == group);
        if again
            || held.len() >= limit
            || held[0].died_before
            || began.elapsed() >= ctx.cfg.transaction_window
            || stop.is_stopped()
        {
            break;
        }
        match s.receive(&ctx.name, ctx.cfg.batch, None, Duration::ZERO).await {
            Ok(m) if m.is_empty() => break,
            Ok(m) => msgs = m,
            Err(e) => {
                // Nobody's fault: every group is given back, the first retried.
                let mut f = Failure::new(held[0].group, held[0].attempt, held[0].keys.clone(), e.into(), true);
                f.forgiven = true;
                f.others = keys_of(&held[1..]);
                f.other_groups = held.len() as u64 - 1;
                f.tokens = tokens_of(&held);
                return Err(f);
            }
        }
    }
    if ctx.hooks.take_pause() {
        info!("test hook: paused before commit");
        stop.stopped().await;
        info!("test hook: resumed");
    }
    let forget: Vec<MessageKey> = held.iter().flat_map(|h| h.forget.iter().copied()).collect();
    let committed = match s.forget_attempts(&forget).await {
        Ok(()) => s.commit().await,
        Err(e) => Err(e),
    };
    if let Err(e) = committed {
        let mut f = Failure::new(held[0].group, held[0].attempt, held[0].keys.clone(), e.into(), true);
        // The transaction has deleted attempt rows: its rollback comes before the notes.
        f.notes_first = false;
        f.tokens = tokens_of(&held);
        if held.len() > 1 {
            // Which group failed the COMMIT is not known: none is blamed, and the groups
            // are taken one per transaction for a while, where each answers for itself.
            f.forgiven = true;
            f.others = keys_of(&held[1..]);
            f.other_groups = held.len() as u64 - 1;
            ctx.solo.fetch_max(u32::try_from(held.len() * 2).unwrap_or(u32::MAX), Ordering::SeqCst);
        }
        return Err(f);
    }
    held.iter().for_each(|h| ctx.unfinished.end(h.token));
    Ok(held)
}

/// A receive returns a dialog's Error before the dialog's other messages, whatever
/// order they were sent in ("Broker System Messages"). One that came back with as many
/// messages as it `asked` for (a full batch, or the one message of a retry) may have left
/// the rest of an errored dialog behind: a Fout or an Antwoord that the Error's end would
/// discard unhandled, or, in a retry, the very message that failed. The rest of each
/// such dialog is received too, in this transaction (RECEIVE … WHERE
/// conversation_handle, as a diversion does), so the dialog loop handles it before the
/// Error. All of it, however many: what is left behind would be lost (the batch may
/// then exceed `batch`, as a diversion's does).
async fn rest_of_errored_dialogs<S: Session>(
    s: &mut S,
    queue: &str,
    msgs: &mut Vec<Message>,
    asked: i32,
) -> Result<(), BrokerError> {
    if msgs.len() < usize::try_from(asked).unwrap_or(usize::MAX) {
        return Ok(());
    }
    let mut errored: Vec<Uuid> = Vec::new();
    for m in msgs.iter().filter(|m| m.message_type == system::ERROR) {
        if !errored.contains(&m.conversation_handle) {
            errored.push(m.conversation_handle);
        }
    }
    for h in errored {
        let rest = s.receive_conversation(queue, h).await?;
        msgs.extend(rest);
    }
    Ok(())
}

/// Inside the open transaction: count the attempt, handle or divert. `later`: the
/// transaction holds other groups already.
async fn process_group<S: Session, T: Transport<Session = S>>(
    ctx: &QueueCtx<T>,
    s: &mut S,
    msgs: &[Message],
    later: bool,
) -> Result<Held, Failure> {
    let started = Instant::now();
    let group = msgs[0].conversation_group_id;
    let keys: Vec<MessageKey> = msgs.iter().map(MessageKey::of).collect();
    let attempts =
        s.count_attempts(&ctx.name, &keys).await.map_err(|e| Failure::new(group, 0, keys.clone(), e.into(), false))?;
    let attempt = attempts.iter().map(|a| a.attempts).max().unwrap_or(1);
    Span::current().record("attempt", attempt);
    let died_before = attempts.iter().any(|a| a.deaths() > 0);
    if later && died_before {
        // Handled beside others, it could kill this worker too and have their
        // messages counted: everything is given back, and it is taken alone.
        let mut f = Failure::new(
            group,
            attempt,
            keys,
            HandlerError::Failed(
                "in flight when a worker stopped before: taken again in a transaction of its own (not counted)".into(),
            ),
            true,
        );
        f.forgiven = true;
        f.died_before = true;
        return Err(f);
    }
    // Registered from the count until the transaction is over: a shutdown that aborts
    // it leaves the registration, and the worker gives the attempt back.
    let token = ctx.unfinished.begin(keys.clone());
    match handle_group(ctx, s, msgs, &keys, &attempts, attempt).await {
        Ok((done, forget)) => {
            Ok(Held { group, keys, forget, attempt, done, token, started, span: Span::current(), died_before })
        }
        Err(error) => {
            let mut f = Failure::new(group, attempt, keys, error, true);
            f.tokens.push(token);
            Err(f)
        }
    }
}

/// The counted attempt: handle (or divert). Returns what it came to and the attempt
/// rows the COMMIT is to delete.
async fn handle_group<S: Session, T: Transport<Session = S>>(
    ctx: &QueueCtx<T>,
    s: &mut S,
    msgs: &[Message],
    keys: &[MessageKey],
    attempts: &[Attempt],
    attempt: i32,
) -> Result<(Done, Vec<MessageKey>), HandlerError> {
    let max = ctx.settings.max_attempts;
    if attempt > max {
        let letters = divert(ctx, s, msgs, attempts, attempt > max + 1).await?;
        Ok((Done::Diverted(letters.len() as u32), letters))
    } else {
        let handled = ctx.handler.handle(s, msgs).await?;
        Ok((Done::Handled(handled), keys.to_vec()))
    }
}

/// Sets aside the messages of a group that failed too often: each conversation of the
/// group gets the handler's reply (a Fout, where the contract has one) and an error end;
/// every message, including those of these conversations not yet received (an END
/// would discard them), goes to the dead-letter table with the reason. With `minimal`
/// (an earlier diversion of this group failed), only the received messages are kept
/// aside, with no sends or ends that could fail again. Returns the keys of the messages
/// set aside (their attempt rows go at the COMMIT).
async fn divert<S: Session, T: Transport<Session = S>>(
    ctx: &QueueCtx<T>,
    s: &mut S,
    msgs: &[Message],
    attempts: &[Attempt],
    minimal: bool,
) -> Result<Vec<MessageKey>, HandlerError> {
    let counts: HashMap<MessageKey, &Attempt> = attempts.iter().map(|a| (a.key, a)).collect();
    let reason = truncate(&attempts.iter().max_by_key(|a| a.attempts).map_or_else(String::new, diversion_reason), 3000);
    let mut handles: Vec<Uuid> = Vec::new();
    for m in msgs {
        if !handles.contains(&m.conversation_handle) {
            handles.push(m.conversation_handle);
        }
    }
    let mut letters: Vec<Message> = msgs.to_vec();
    if !minimal {
        for h in &handles {
            letters.extend(s.receive_conversation(&ctx.name, *h).await?);
        }
    }
    for m in &letters {
        let n = counts.get(&MessageKey::of(m)).map_or(0, |a| a.attempts - 1);
        s.dead_letter(DeadLetter { queue: &ctx.name, message: m, attempts: n, reason: &reason }).await?;
    }
    if minimal {
        error!(messages = letters.len(), reason = %reason, "diverting failed before: messages kept aside without a reply; their conversations stay open");
    } else {
        for h in &handles {
            let first = letters.iter().find(|m| m.conversation_handle == *h);
            // The other side has ended already: nothing can be sent on it any more.
            let closed = letters.iter().any(|m| {
                m.conversation_handle == *h && [system::END_DIALOG, system::ERROR].contains(&m.message_type.as_str())
            });
            if !closed && let Some((message_type, body)) = first.and_then(|m| ctx.handler.divert_reply(m, &reason)) {
                s.send(*h, message_type, Some(&body)).await?;
            }
            ctx.handler.on_diverted(s, *h, &reason).await?;
            s.end_conversation(*h, Some((system::DIVERTED, &reason))).await?;
        }
        error!(messages = letters.len(), conversations = handles.len(), reason = %reason, "messages diverted to the dead-letter table");
    }
    Ok(letters.iter().map(MessageKey::of).collect())
}

/// Why a message is diverted, from what its counted attempts died of: the handler's
/// last error, the worker stopping while handling it (killed, crashed, out of memory:
/// no error could be noted), or both; transient failures, given back, are mentioned.
pub(crate) fn diversion_reason(a: &Attempt) -> String {
    let failed = a.attempts - 1;
    let deaths = a.deaths();
    let last = a.last_error.as_deref().unwrap_or("(no error recorded)");
    let mut reason = if deaths == 0 {
        format!("diverted after {failed} failed attempts: {last}")
    } else if a.failures == 0 {
        format!(
            "diverted after {failed} failed attempts: each time the worker stopped while handling it \
             (killed, crashed or out of memory)"
        )
    } else {
        format!(
            "diverted after {failed} failed attempts: {deaths} ended with the worker stopping while handling it \
             (killed, crashed or out of memory); the last error of the others: {last}"
        )
    };
    if a.transient_failures > 0 {
        reason.push_str(&format!(" ({} transient failures besides, not counted)", a.transient_failures));
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(attempts: i32, failures: i32, transient: i32, last: Option<&str>) -> Attempt {
        Attempt {
            key: MessageKey { conversation_handle: Uuid::nil(), sequence: 1 },
            attempts,
            last_error: last.map(str::to_owned),
            failures,
            transient_failures: transient,
        }
    }

    #[test]
    fn the_reason_says_what_the_counted_attempts_died_of() {
        assert_eq!(
            diversion_reason(&attempt(4, 3, 0, Some("the handler choked"))),
            "diverted after 3 failed attempts: the handler choked"
        );
        let killed = diversion_reason(&attempt(4, 0, 0, None));
        assert!(killed.contains("each time the worker stopped while handling it"), "{killed}");
        let mixed = diversion_reason(&attempt(4, 1, 2, Some("bad value")));
        assert!(mixed.starts_with("diverted after 3 failed attempts: 2 ended with the worker stopping"), "{mixed}");
        assert!(mixed.contains("the last error of the others: bad value"), "{mixed}");
        assert!(mixed.ends_with("(2 transient failures besides, not counted)"), "{mixed}");
    }
}
