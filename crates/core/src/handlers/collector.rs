//! The `resultaat-opslag` handler: the collector on the initiator's queue. An Antwoord
//! replaces the stored wage factors of its (dienstverband, periode) only when its
//! roster version is newer than the stored one (latest wins, in the store's one
//! statement); then the collector ends the dialog, and the calculation side ends its
//! side on the EndDialog. A reused dialog (`SleutelContract`) stays open after an
//! answer; its conversation timer, started when no request of it is left open, brings a
//! DialogTimer, and the collector ends it if the key is still idle. A Fout or an Error is
//! recorded in the calculation log with the reason (a Fout for the oldest request open on
//! the dialog), and the dialog is ended (EndDialog, Error, timers and message types outside
//! the contract are the shared dialog loop's, [`super::dialog`]). Where the results live is the store's
//! business ([`PayrollStore`], one implementation per back end).

use tracing::warn;
use uuid::Uuid;

use super::dialog::{self, Dialog, End, Incoming, Outcome, Step};
use crate::contract::{self, Limits, Reden, VERVANGEN, message_types};
use crate::transport::Message;
use crate::transport::{PayrollStore, Stored};
use crate::worker::handler::{BoxFuture, Handled, Handler, HandlerError};

/// The name of this handler in the configuration.
pub const NAME: &str = "resultaat-opslag";

pub struct Collector {
    limits: Limits,
}

impl Collector {
    pub fn new(limits: Limits) -> Self {
        Self { limits }
    }

    /// Stores an Antwoord if it is newer than the stored result, and ends the dialog
    /// (a reused one stays open until the key is idle: `on_timer`).
    async fn on_antwoord<S: PayrollStore>(
        &self,
        s: &mut S,
        h: Uuid,
        body: &[u8],
        reused: bool,
    ) -> Result<Step, HandlerError> {
        match contract::decode_antwoord(body, &self.limits) {
            Ok(a) => {
                let superseded = a.waarschuwingen.iter().any(|w| w.code == VERVANGEN);
                let outcome = match s.store_antwoord(h, &a, superseded).await? {
                    Stored::Stored => Outcome::Answered,
                    Stored::Older | Stored::Superseded => Outcome::Superseded,
                };
                if reused {
                    return Ok(Step::new(outcome, End::Open));
                }
                s.end_conversation(h, None).await?;
                Ok(Step::new(outcome, End::Ended))
            }
            Err(e) => {
                let reason = format!("unreadable Antwoord: {e}");
                warn!(reason = %reason, "Antwoord refused");
                s.record_request_fout(h, &reason, false).await?;
                s.end_conversation(h, Some((e.reden.error_number(), &reason))).await?;
                Ok(Step::new(Outcome::Faulted, End::WithError))
            }
        }
    }

    /// Records a Fout's reason in the calculation log, and ends the dialog.
    async fn on_fout<S: PayrollStore>(&self, s: &mut S, h: Uuid, body: &[u8]) -> Result<Step, HandlerError> {
        // An internal Fout (the request was diverted) or a newer-contract one (the
        // worker is older than the Vraag: an upgrade in the wrong order) is the
        // environment's fault: the sweep sends the version again. Any other is the
        // request's.
        let (reason, repairable) = match contract::decode_fout(body, &self.limits) {
            Ok(f) => (
                format!("{} ({}): {}", f.reden, f.error_number, f.error_message),
                matches!(f.reden, Reden::Internal | Reden::NewerContract),
            ),
            Err(e) => (format!("unreadable Fout: {e}"), false),
        };
        warn!(reason = %reason, "the calculation answered with a Fout");
        s.record_request_fout(h, &reason, repairable).await?;
        s.end_conversation(h, None).await?;
        Ok(Step::new(Outcome::Faulted, End::Ended))
    }
}

impl<S: PayrollStore> Dialog<S> for Collector {
    const RECEIVES: &'static [&'static str] = &[message_types::ANTWOORD, message_types::FOUT];

    async fn on_message(&self, s: &mut S, m: Incoming<'_>) -> Result<Step, HandlerError> {
        if m.message.message_type == message_types::ANTWOORD {
            let reused = m.message.contract == contract::SLEUTEL_CONTRACT;
            self.on_antwoord(s, m.handle(), &m.message.body, reused).await
        } else {
            self.on_fout(s, m.handle(), &m.message.body).await
        }
    }

    /// A diversion without a Fout, an expired LIFETIME, a broker error: the
    /// environment's, so the sweep sends the version again.
    async fn on_error(&self, s: &mut S, handle: Uuid, code: i32, text: &str) -> Result<(), HandlerError> {
        s.record_fout(handle, &format!("error {code}: {text}"), true).await?;
        Ok(())
    }

    async fn on_breach(&self, s: &mut S, handle: Uuid, text: &str) -> Result<(), HandlerError> {
        s.record_request_fout(handle, text, false).await?;
        Ok(())
    }

    /// A reused dialog's idle timer: ended when the key has had no request open on it
    /// for the idle time (the store then says it is no longer the key's).
    async fn on_timer(&self, s: &mut S, handle: Uuid, contract: &str) -> Result<bool, HandlerError> {
        Ok(contract == contract::SLEUTEL_CONTRACT && s.dialog_idle(handle).await?)
    }
}

impl<S: PayrollStore> Handler<S> for Collector {
    fn handle<'a>(
        &'a self,
        session: &'a mut S,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(dialog::run(self, session, messages))
    }

    /// The collector replies to nobody: a diverted answer is only set aside (its dialog
    /// ends with an error, so the calculation side ends too).
    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        None
    }

    /// A diverted answer leaves its request without an outcome unless recorded here: an
    /// internal failure (the environment's, in the format of an internal Fout), which
    /// the sweep sends again.
    fn on_diverted<'a>(
        &'a self,
        s: &'a mut S,
        handle: Uuid,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let text = format!("{} ({}): {reason}", Reden::Internal, crate::worker::DIVERTED);
            s.record_fout(handle, &text, true).await?;
            Ok(())
        })
    }
}
