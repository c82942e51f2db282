//! What the worker does with the messages of a received group: the [`Handler`] trait a
//! queue's handler implements, its error type, and the registry that maps the handler
//! names of the configuration to handlers.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use uuid::Uuid;

use crate::transport::Session;
use crate::transport::{BrokerError, ErrorKind, Message};

/// A boxed future that can move between threads (what a handler returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What one group's handling did, for the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handled {
    /// Requests answered (an Antwoord sent, or a result stored).
    pub answered: u32,
    /// Requests that came to a Fout: answered with one (the calculation, its conversation
    /// ended with an error), or received as one and recorded (the collector).
    pub faulted: u32,
    /// Conversations this side ended without an error: on EndDialog or Error, or with
    /// its answer (the calculation after the last Vraag, the collector after storing
    /// or recording).
    pub ended: u32,
    /// Requests answered as superseded by a newer roster version, without computing
    /// (or, at the collector, answers older than the stored result).
    pub superseded: u32,
    /// Messages that needed no work (a timer, a message of a conversation already ended).
    pub skipped: u32,
}

impl std::ops::AddAssign for Handled {
    fn add_assign(&mut self, o: Self) {
        self.answered += o.answered;
        self.faulted += o.faulted;
        self.ended += o.ended;
        self.superseded += o.superseded;
        self.skipped += o.skipped;
    }
}

/// Why a group's handling failed: the whole transaction rolls back, and the messages
/// are attempted again (or diverted once they have failed too often).
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("{0}")]
    Failed(String),
}

impl HandlerError {
    /// Deadlock, lock timeout, serialization failure or lost connection.
    pub fn is_retryable(&self) -> bool {
        matches!(self, HandlerError::Broker(e) if e.is_retryable())
    }

    /// The session cannot be used any more: open a new one.
    pub fn is_connection(&self) -> bool {
        matches!(self, HandlerError::Broker(e) if e.kind == ErrorKind::Connection)
    }

    /// 8426/8429: the conversation is gone or ended (typically by the other side while
    /// this transaction ran).
    pub fn is_closed_conversation(&self) -> bool {
        matches!(self, HandlerError::Broker(e) if matches!(e.kind, ErrorKind::ConversationNotFound | ErrorKind::InvalidState))
    }

    pub fn is_queue_disabled(&self) -> bool {
        matches!(self, HandlerError::Broker(e) if e.kind == ErrorKind::QueueDisabled)
    }
}

/// Handles the messages of one conversation group inside the receiving transaction.
/// It sends and ends through the session; it must not commit or roll back.
pub trait Handler<S: Session>: Send + Sync + 'static {
    /// Handles `messages` (one group, in order). An error rolls everything back.
    fn handle<'a>(
        &'a self,
        session: &'a mut S,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Handled, HandlerError>>;

    /// When a message of this queue is diverted after too many failed attempts: the
    /// reply to send before ending its conversation with an error (message type and
    /// body), if the contract lets this side send one.
    fn divert_reply(&self, message: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)>;

    /// When the messages of conversation `handle` of this queue are diverted, before it
    /// ends with an error: what this side records of it, in the same transaction (the
    /// collector: the calculation log's outcome, so that no request is left without
    /// one). Nothing by default.
    fn on_diverted<'a>(
        &'a self,
        _session: &'a mut S,
        _handle: Uuid,
        _reason: &'a str,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The handlers by the name a queue's `handler` key uses.
pub struct Handlers<S: Session> {
    by_name: HashMap<String, Arc<dyn Handler<S>>>,
}

impl<S: Session> Default for Handlers<S> {
    fn default() -> Self {
        Self { by_name: HashMap::new() }
    }
}

impl<S: Session> Handlers<S> {
    pub fn with(mut self, name: &str, handler: Arc<dyn Handler<S>>) -> Self {
        self.by_name.insert(name.to_owned(), handler);
        self
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Handler<S>>> {
        self.by_name.get(name).cloned()
    }
}
