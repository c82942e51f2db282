//! What every transport shares: a received message, the system message types with the
//! error codes our side ends conversations with and the Error message's body, and the
//! broker's errors in Service Broker's terms.

use uuid::Uuid;

/// The system message types (compare these exact names), the codes of our own
/// `END CONVERSATION … WITH ERROR`s, and the body of an Error message.
pub mod system {
    use crate::contract::{self, Limits};

    pub const END_DIALOG: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog";
    pub const ERROR: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/Error";
    pub const DIALOG_TIMER: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer";

    /// `END CONVERSATION WITH ERROR` code for a message type the contract does not allow.
    pub const CONTRACT_BREACH: i32 = 50900;
    /// `END CONVERSATION WITH ERROR` code of a conversation whose message was diverted.
    pub const DIVERTED: i32 = 50901;

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
