//! The `loonfactor-berekening` handler: the calculation service's side of the dialog.
//! A Vraag gets an Antwoord and our side ends in the same transaction (the initiator
//! receives the Antwoord and the EndDialog together and ends its side: one transaction
//! less per request than waiting for its EndDialog), or, when it cannot be answered, a
//! Fout and END CONVERSATION WITH ERROR. A dialog carries one request, as the roster
//! triggers send by default; several Vraags of one dialog in one receive are all
//! answered before it ends. A reused dialog (its contract `SleutelContract`: the key's
//! next versions come on it) is not ended with an answer: the initiator ends it once the
//! key is idle, and this side on the EndDialog. A Vraag older
//! than a version already answered for its (dienstverband, periode) is answered as
//! superseded, without computing. EndDialog, Error, timers and message types
//! outside the contract are the shared dialog loop's ([`super::dialog`]).

use std::sync::Arc;

use tracing::{debug, warn};
use uuid::Uuid;

use super::dialog::{self, Dialog, End, Incoming, Outcome, Step};
use crate::contract::{self, Antwoord, Limits, Reden, RekenserverFout, Vraag, Waarschuwing, message_types};
use crate::engine::{self, Tables};
use crate::transport::Message;
use crate::transport::{PayrollStore, Session};
use crate::worker::handler::{BoxFuture, Handled, Handler, HandlerError};

/// The name of this handler in the configuration.
pub const NAME: &str = "loonfactor-berekening";

pub struct Calculation {
    tables: Arc<Tables>,
    limits: Limits,
    /// Whether answers carry `Rekenversie` (`engine.rekenversie`).
    rekenversie: bool,
}

impl Calculation {
    pub fn new(tables: Arc<Tables>, limits: Limits) -> Self {
        Self { tables, limits, rekenversie: true }
    }

    /// Answers without `Rekenversie` (for collectors of an older release, during an upgrade).
    pub fn without_rekenversie(self) -> Self {
        Self { rekenversie: false, ..self }
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
        let mut calc =
            engine::calculate(vraag, &self.tables, false).map_err(|e| (e.to_fout(Some(vraag.id)), e.to_string()))?;
        if !self.rekenversie {
            calc.antwoord.rekenversie = None;
        }
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

    /// Answers a Vraag (or, when a newer version was answered already, answers it as
    /// superseded without computing); our side ends after the last Vraag of the dialog.
    async fn on_vraag<S: PayrollStore>(&self, s: &mut S, m: Incoming<'_>) -> Result<Step, HandlerError> {
        let h = m.handle();
        if m.closing {
            debug!("the initiator has ended the conversation: Vraag not answered");
            return Ok(Step::new(Outcome::Skipped, End::Open));
        }
        let vraag = match self.decode(&m.message.body) {
            Ok(v) => v,
            Err((fout, reason)) => {
                self.fault(s, h, fout, &reason).await?;
                return Ok(Step::new(Outcome::Faulted, End::WithError));
            }
        };
        let (dv, periode) = (vraag.dienstverband.id, vraag.periode.id);
        let outcome = if !s.claim_version(dv, periode, vraag.versie).await? {
            debug!(dienstverband = dv, periode, versie = vraag.versie, "superseded: answered without computing");
            let xml = contract::encode_antwoord(&superseded(&vraag));
            s.send(h, message_types::ANTWOORD, Some(xml.as_bytes())).await?;
            Outcome::Superseded
        } else {
            match self.compute(&vraag) {
                Ok(xml) => {
                    s.send(h, message_types::ANTWOORD, Some(xml.as_bytes())).await?;
                    Outcome::Answered
                }
                Err((fout, reason)) => {
                    self.fault(s, h, fout, &reason).await?;
                    return Ok(Step::new(Outcome::Faulted, End::WithError));
                }
            }
        };
        // A reused dialog (its own contract) stays open for the key's next versions: the
        // initiator ends it once the key is idle, and this side on its EndDialog.
        if !m.last || m.message.contract == contract::SLEUTEL_CONTRACT {
            return Ok(Step::new(outcome, End::Open));
        }
        s.end_conversation(h, None).await?;
        Ok(Step::new(outcome, End::Ended))
    }
}

impl<S: PayrollStore> Dialog<S> for Calculation {
    const RECEIVES: &'static [&'static str] = &[message_types::VRAAG];

    async fn on_message(&self, s: &mut S, m: Incoming<'_>) -> Result<Step, HandlerError> {
        self.on_vraag(s, m).await
    }
}

impl<S: PayrollStore> Handler<S> for Calculation {
    fn handle<'a>(
        &'a self,
        session: &'a mut S,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(dialog::run(self, session, messages))
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
        rekenversie: None,
    }
}
