//! The benchmark's handler: each message's business effect (its group's row moves on, a
//! reply row), in the receiving transaction, on either transport; or nothing at all for
//! the burn-down.

use uuid::Uuid;

use crate::broker::mssql::MssqlSession;
use crate::transport::Session;
use crate::transport::{BrokerError, Message};
use crate::worker::handler::BoxFuture;
use crate::worker::{Handled, Handler, HandlerError};

/// The benchmark's queue, and its handlers' names: each message's effect, or nothing.
pub const QUEUE: &str = "bench_target";
pub const NAME: &str = "bench-effect";
pub const NOOP_NAME: &str = "bench-noop";
/// The body of a message the handler fails on, every time (the poison workload).
pub const POISON: &[u8] = b"poison";

/// Where a message takes effect.
pub trait EffectStore: Session {
    fn apply(
        &mut self,
        conversation: Uuid,
        seq: i64,
        body: &[u8],
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;
}

impl EffectStore for crate::broker::postgres::Session {
    async fn apply(&mut self, conversation: Uuid, seq: i64, body: &[u8]) -> Result<(), BrokerError> {
        self.client()
            .execute(super::stmt::APPLY.sql, &[&conversation, &seq, &body])
            .await
            .map_err(crate::broker::postgres::error_of)?;
        Ok(())
    }
}

impl EffectStore for MssqlSession {
    async fn apply(&mut self, conversation: Uuid, seq: i64, body: &[u8]) -> Result<(), BrokerError> {
        self.execute(super::tsql::APPLY.sql, &[&conversation, &seq, &body]).await
    }
}

/// Applies every message (or, with `noop`, does nothing but let the RECEIVE commit). A
/// message whose body is [`POISON`] fails its handling: the transaction rolls back, the
/// worker retries it and, after its attempts, diverts it.
pub struct Effect {
    pub noop: bool,
}

impl<S: EffectStore> Handler<S> for Effect {
    fn handle<'a>(
        &'a self,
        session: &'a mut S,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            if !self.noop {
                for m in messages {
                    if m.body == POISON {
                        return Err(HandlerError::Failed(format!("bench: message {} is poison", m.sequence)));
                    }
                    session.apply(m.conversation_handle, m.sequence, &m.body).await?;
                }
            }
            Ok(Handled { answered: messages.len() as u32, ..Handled::default() })
        })
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        None
    }
}

/// Adds the bench's handlers ([`NAME`], [`NOOP_NAME`]) to a worker's: the bench's worker
/// processes (`sbworker bench-worker`) serve them beside the production ones.
pub fn register<S: EffectStore>(h: crate::worker::Handlers<S>) -> crate::worker::Handlers<S> {
    h.with(NAME, std::sync::Arc::new(Effect { noop: false }))
        .with(NOOP_NAME, std::sync::Arc::new(Effect { noop: true }))
}

/// Every handler name a bench worker serves.
pub const HANDLERS: &[&str] = &[crate::handlers::calculation::NAME, crate::handlers::collector::NAME, NAME, NOOP_NAME];
