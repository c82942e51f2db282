//! The `resultaat-opslag` handler: the collector on the initiator's queue. An Antwoord
//! replaces the stored wage factors of its (dienstverband, periode) only when its
//! roster version is newer than the stored one (latest wins, in the store's one
//! statement); then the collector ends the dialog, and the calculation side ends its
//! side on the EndDialog. A Fout or an Error is recorded in the calculation log with the
//! reason, and the dialog is ended. Where the results live is the store's
//! business ([`PayrollStore`], one implementation per back end).

use std::collections::HashSet;

use tracing::{Instrument, debug, info_span, warn};
use uuid::Uuid;

use super::calculation::{CONTRACT_BREACH, VERVANGEN, error_body};
use crate::contract::{self, Limits, Reden, message_types};
use crate::transport::{Message, system};
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

    async fn handle_all<S: PayrollStore>(&self, s: &mut S, messages: &[Message]) -> Result<Handled, HandlerError> {
        let mut done = Handled::default();
        let mut ended: HashSet<Uuid> = HashSet::new();
        for m in messages {
            let h = m.conversation_handle;
            let span = info_span!("message", conversation = %h, seq = m.sequence, message_type = %m.message_type);
            async {
                if ended.contains(&h) {
                    debug!("conversation already ended in this transaction; message dropped");
                    done.skipped += 1;
                    return Ok(());
                }
                match m.message_type.as_str() {
                    message_types::ANTWOORD => match contract::decode_antwoord(&m.body, &self.limits) {
                        Ok(a) => {
                            let superseded = a.waarschuwingen.iter().any(|w| w.code == VERVANGEN);
                            match s.store_antwoord(h, &a, superseded).await? {
                                Stored::Stored => done.answered += 1,
                                Stored::Older | Stored::Superseded => done.superseded += 1,
                            }
                            s.end_conversation(h, None).await?;
                        }
                        Err(e) => {
                            let reason = format!("unreadable Antwoord: {e}");
                            warn!(reason = %reason, "Antwoord refused");
                            s.record_fout(h, &reason, false).await?;
                            s.end_conversation(h, Some((e.reden.error_number(), &reason))).await?;
                            done.faulted += 1;
                        }
                    },
                    message_types::FOUT => {
                        // An internal Fout (the request was diverted) is the environment's
                        // fault: the sweep sends the version again. Any other is the request's.
                        let (reason, repairable) = match contract::decode_fout(&m.body, &self.limits) {
                            Ok(f) => (
                                format!("{} ({}): {}", f.reden, f.error_number, f.error_message),
                                f.reden == Reden::Internal,
                            ),
                            Err(e) => (format!("unreadable Fout: {e}"), false),
                        };
                        warn!(reason = %reason, "the calculation answered with a Fout");
                        s.record_fout(h, &reason, repairable).await?;
                        s.end_conversation(h, None).await?;
                        done.faulted += 1;
                    }
                    system::ERROR => {
                        let (code, text) = error_body(&m.body);
                        warn!(code, description = %text, "the calculation ended the dialog with an error");
                        // A diversion without a Fout, an expired LIFETIME, a broker error.
                        s.record_fout(h, &format!("error {code}: {text}"), true).await?;
                        s.end_conversation(h, None).await?;
                        done.ended += 1;
                    }
                    system::END_DIALOG => {
                        s.end_conversation(h, None).await?;
                        done.ended += 1;
                    }
                    system::DIALOG_TIMER => {
                        debug!("dialog timer ignored");
                        done.skipped += 1;
                        return Ok(());
                    }
                    other => {
                        warn!(
                            message_type = other,
                            "message type outside the contract; conversation ended with an error"
                        );
                        let text = format!("message type {other} is not part of the calculation contract");
                        s.record_fout(h, &text, false).await?;
                        s.end_conversation(h, Some((CONTRACT_BREACH, &text))).await?;
                        done.faulted += 1;
                    }
                }
                ended.insert(h);
                Ok::<(), HandlerError>(())
            }
            .instrument(span)
            .await?;
        }
        Ok(done)
    }
}

impl<S: PayrollStore> Handler<S> for Collector {
    fn handle<'a>(
        &'a self,
        session: &'a mut S,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(self.handle_all(session, messages))
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
