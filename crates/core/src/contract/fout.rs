//! Building a RekenserverFout from an error, in the shape of the original's CATCH block.

use uuid::Uuid;

use super::chars::xml_safe;
use super::model::{Reden, RekenserverFout};

/// `ErrorProcedure` of every Fout the worker writes.
pub const PROCEDURE: &str = "sbworker.loonfactor-berekening";

/// The Fout for an error with a reason, message and (where known) input line and Vraag Id.
/// Severity 16 (a user error, as `RAISERROR(…, 16, 1)`), state 1. A character of the
/// message that XML does not allow (the message may quote the input, e.g. an element
/// name) is replaced by its escape (`\u{1}`), so the Fout can be sent and logged as is.
pub fn fout_for(
    reden: Reden,
    message: impl Into<String>,
    line: Option<u32>,
    vraag_id: Option<Uuid>,
) -> RekenserverFout {
    RekenserverFout {
        error_number: reden.error_number(),
        error_severity: 16,
        error_state: 1,
        error_procedure: PROCEDURE.to_owned(),
        error_line: line.map_or(0, |l| i32::try_from(l).unwrap_or(i32::MAX)),
        error_message: xml_safe(message.into()),
        vraag_id,
        reden,
    }
}

impl super::DecodeError {
    /// The Fout that answers a body that failed to decode.
    pub fn to_fout(&self) -> RekenserverFout {
        fout_for(self.reden, self.to_string(), self.line, self.message_id)
    }
}
