//! The `loonfactor-berekening` handler: the calculation service's side of the dialog.
//! A Vraag gets an Antwoord and our side ends in the same transaction (the initiator
//! receives the Antwoord and the EndDialog together and ends its side: one transaction
//! less per request than waiting for its EndDialog), or, when it cannot be answered, a
//! Fout and END CONVERSATION WITH ERROR. A dialog carries one request, as the roster
//! triggers send; several Vraags of one dialog in one receive are all answered before
//! it ends. A Vraag older
//! than a version already answered for its (dienstverband, periode) is answered as
//! superseded, without computing. EndDialog ends
//! our side; an Error is logged and ends our side; any other message type breaks the
//! contract and ends the conversation with an error.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::{Instrument, debug, info_span, warn};
use uuid::Uuid;

use crate::contract::{self, Antwoord, Limits, Reden, RekenserverFout, Vraag, Waarschuwing, message_types};
use crate::engine::{self, Tables};
use crate::transport::{Message, system};
use crate::transport::{PayrollStore, Session};
use crate::worker::handler::{BoxFuture, Handled, Handler, HandlerError};

/// The name of this handler in the configuration.
pub const NAME: &str = "loonfactor-berekening";

/// `END CONVERSATION WITH ERROR` code for a message type the contract does not allow.
pub const CONTRACT_BREACH: i32 = 50900;

pub struct Calculation {
    tables: Arc<Tables>,
    limits: Limits,
}

impl Calculation {
    pub fn new(tables: Arc<Tables>, limits: Limits) -> Self {
        Self { tables, limits }
    }

    /// The reply to a Vraag body when nothing has superseded it: the Antwoord XML, or
    /// the Fout and its reason.
    pub fn answer(&self, body: &[u8]) -> Result<String, (RekenserverFout, String)> {
        let vraag = self.decode(body)?;
        self.compute(&vraag)
    }

    fn decode(&self, body: &[u8]) -> Result<Vraag, (RekenserverFout, String)> {
        contract::decode_vraag(body, &self.limits).map_err(|e| (e.to_fout(), e.to_string()))
    }

    fn compute(&self, vraag: &Vraag) -> Result<String, (RekenserverFout, String)> {
        let calc =
            engine::calculate(vraag, &self.tables, false).map_err(|e| (e.to_fout(Some(vraag.id)), e.to_string()))?;
        Ok(contract::encode_antwoord(&calc.antwoord))
    }

    /// Answers a Vraag with a Fout and ends the conversation with its error.
    async fn fault<S: Session>(
        &self,
        s: &mut S,
        h: Uuid,
        fout: RekenserverFout,
        reason: &str,
    ) -> Result<(), HandlerError> {
        warn!(reason = %reason, "Vraag answered with a Fout");
        let xml = contract::encode_fout(&fout);
        s.send(h, message_types::FOUT, Some(xml.as_bytes())).await?;
        s.end_conversation(h, Some((fout.error_number, &fout.error_message))).await?;
        Ok(())
    }

    async fn handle_all<S: PayrollStore>(&self, s: &mut S, messages: &[Message]) -> Result<Handled, HandlerError> {
        let mut done = Handled::default();
        // Conversations this transaction has ended: their later messages are moot.
        let mut ended: HashSet<Uuid> = HashSet::new();
        // Conversations the initiator has ended (an EndDialog or Error in this batch):
        // their requests are not answered, as nothing can be sent on them any more.
        let closing: HashSet<Uuid> = messages
            .iter()
            .filter(|m| m.message_type == system::END_DIALOG || m.message_type == system::ERROR)
            .map(|m| m.conversation_handle)
            .collect();
        // The last Vraag of each conversation in this batch: our side ends once it is answered.
        let last_vraag: std::collections::HashMap<Uuid, usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.message_type == message_types::VRAAG)
            .map(|(i, m)| (m.conversation_handle, i))
            .collect();
        for (i, m) in messages.iter().enumerate() {
            let end_after = last_vraag.get(&m.conversation_handle) == Some(&i);
            let h = m.conversation_handle;
            let span = info_span!("message", conversation = %h, seq = m.sequence, message_type = %m.message_type);
            async {
                if ended.contains(&h) {
                    debug!("conversation already ended in this transaction; message dropped");
                    done.skipped += 1;
                    return Ok(());
                }
                match m.message_type.as_str() {
                    message_types::VRAAG if closing.contains(&h) => {
                        debug!("the initiator has ended the conversation: Vraag not answered");
                        done.skipped += 1;
                    }
                    message_types::VRAAG => {
                        let vraag = match self.decode(&m.body) {
                            Ok(v) => v,
                            Err((fout, reason)) => {
                                self.fault(s, h, fout, &reason).await?;
                                ended.insert(h);
                                done.faulted += 1;
                                return Ok(());
                            }
                        };
                        let (dv, periode) = (vraag.dienstverband.id, vraag.periode.id);
                        if !s.claim_version(dv, periode, vraag.versie).await? {
                            debug!(
                                dienstverband = dv,
                                periode,
                                versie = vraag.versie,
                                "superseded: answered without computing"
                            );
                            let xml = contract::encode_antwoord(&superseded(&vraag));
                            s.send(h, message_types::ANTWOORD, Some(xml.as_bytes())).await?;
                            done.superseded += 1;
                        } else {
                            match self.compute(&vraag) {
                                Ok(xml) => {
                                    s.send(h, message_types::ANTWOORD, Some(xml.as_bytes())).await?;
                                    done.answered += 1;
                                }
                                Err((fout, reason)) => {
                                    self.fault(s, h, fout, &reason).await?;
                                    ended.insert(h);
                                    done.faulted += 1;
                                    return Ok(());
                                }
                            }
                        }
                        if end_after {
                            s.end_conversation(h, None).await?;
                            ended.insert(h);
                            done.ended += 1;
                        }
                    }
                    system::END_DIALOG => {
                        s.end_conversation(h, None).await?;
                        ended.insert(h);
                        done.ended += 1;
                    }
                    system::ERROR => {
                        let (code, text) = error_body(&m.body);
                        warn!(code, description = %text, "the other side ended the conversation with an error");
                        s.end_conversation(h, None).await?;
                        ended.insert(h);
                        done.ended += 1;
                    }
                    system::DIALOG_TIMER => {
                        debug!("dialog timer ignored");
                        done.skipped += 1;
                    }
                    other => {
                        warn!(
                            message_type = other,
                            "message type outside the contract; conversation ended with an error"
                        );
                        let text = format!("message type {other} is not part of the calculation contract");
                        s.end_conversation(h, Some((CONTRACT_BREACH, &text))).await?;
                        ended.insert(h);
                        done.faulted += 1;
                    }
                }
                Ok::<(), HandlerError>(())
            }
            .instrument(span)
            .await?;
        }
        Ok(done)
    }
}

impl<S: PayrollStore> Handler<S> for Calculation {
    fn handle<'a>(
        &'a self,
        session: &'a mut S,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(self.handle_all(session, messages))
    }

    fn divert_reply(&self, message: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        if message.message_type != message_types::VRAAG {
            return None;
        }
        let id = contract::decode_vraag(&message.body, &self.limits).ok().map(|v| v.id);
        let fout = contract::fout_for(Reden::Internal, reason, None, id);
        Some((message_types::FOUT, contract::encode_fout(&fout).into_bytes()))
    }
}

pub use crate::contract::VERVANGEN;

/// The answer to a Vraag older than one already answered for its key.
pub fn superseded(vraag: &Vraag) -> Antwoord {
    Antwoord {
        id: vraag.id,
        timestamp: vraag.timestamp.clone(),
        versie: vraag.versie,
        dienstverband_id: vraag.dienstverband.id,
        periode_id: vraag.periode.id,
        mutaties: Vec::new(),
        waarschuwingen: vec![Waarschuwing {
            code: VERVANGEN.into(),
            datum: None,
            tekst: format!("roster version {} is superseded: a newer version was answered already", vraag.versie),
        }],
    }
}

/// Code and description of a Service Broker Error message body (`<Error
/// xmlns="…/Error"><Code>…</Code><Description>…</Description></Error>`), in UTF-8 or
/// UTF-16; what cannot be read is reported as such.
pub fn error_body(body: &[u8]) -> (i32, String) {
    let Ok(text) = contract::body_text(body, &Limits::default()) else {
        return (0, "(unreadable Error body)".into());
    };
    let inner = |tag: &str| {
        let open = format!("<{tag}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{tag}>"))? + start;
        Some(quick_xml::escape::unescape(&text[start..end]).map(|c| c.into_owned()).unwrap_or_default())
    };
    let code = inner("Code").and_then(|c| c.trim().parse().ok()).unwrap_or(0);
    (code, inner("Description").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::error_body;

    #[test]
    fn reads_the_error_body_in_utf8_and_utf16() {
        let xml = "<Error xmlns=\"http://schemas.microsoft.com/SQL/ServiceBroker/Error\"><Code>-8489</Code>\
                   <Description>dialog &amp; lifetime</Description></Error>";
        assert_eq!(error_body(xml.as_bytes()), (-8489, "dialog & lifetime".into()));
        let mut utf16 = vec![0xFF, 0xFE];
        utf16.extend(xml.encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(error_body(&utf16), (-8489, "dialog & lifetime".into()));
        assert_eq!(error_body(b"\xff"), (0, "(unreadable Error body)".into()));
    }
}
