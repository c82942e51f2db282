//! What every transport shares: a received message, the system message types, and the
//! broker's errors in Service Broker's terms.

use uuid::Uuid;

/// The system message types (compare these exact names).
pub mod system {
    pub const END_DIALOG: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog";
    pub const ERROR: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/Error";
    pub const DIALOG_TIMER: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer";
}

/// One received message, as a RECEIVE row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The broker's id of the message (to report a rollback of its receive).
    pub id: i64,
    pub conversation_group_id: Uuid,
    pub conversation_handle: Uuid,
    pub sequence: i64,
    pub message_type: String,
    pub body: Vec<u8>,
    pub service: String,
    pub contract: String,
}

/// What went wrong, in Service Broker's terms (the SQL Server error number where one
/// exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Deadlock or serialization failure (1205, 1222; 40P01, 40001): retry.
    Retryable,
    /// The connection is gone: retry on a new one.
    Connection,
    /// 9617: the queue is disabled.
    QueueDisabled,
    /// 8426: no such conversation.
    ConversationNotFound,
    /// 8429: the endpoint's state does not allow this.
    InvalidState,
    /// 8431, 8432: the contract does not allow this message type from this side.
    ContractViolation,
    /// 9615: the body is not what the message type requires.
    Validation,
    /// Unknown service, contract, queue or group.
    NotFound,
    Other,
}

/// A broker error: its kind, the SQL Server error number it stands for (0 when none),
/// and the server's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (broker error {number}, {kind:?})")]
pub struct BrokerError {
    pub kind: ErrorKind,
    pub number: i32,
    pub message: String,
}

impl BrokerError {
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Retryable | ErrorKind::Connection)
    }

    pub fn is_deadlock(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }
}
