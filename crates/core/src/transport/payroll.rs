//! The payroll calls a back end makes for the handlers, inside the receiving
//! transaction: the version claim of the calculation side (latest wins), and storing an
//! Antwoord or recording a Fout on the collector's side. The handlers use these; each
//! back end implements them beside its [`Session`].

use std::future::Future;

use uuid::Uuid;

use super::{BrokerError, Session};
use crate::contract::Antwoord;

/// What storing an Antwoord did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Its factors are now the stored result of its key.
    Stored,
    /// A newer version was stored already; nothing changed.
    Older,
    /// The calculation answered it as superseded; nothing to store.
    Superseded,
}

/// Where the payroll results live, reached inside the receiving transaction.
pub trait PayrollStore: Session {
    /// The calculation side: claims roster version `versie` of (dienstverband, periode)
    /// for answering. False when a newer version was answered already (superseded);
    /// the same version again (a repair, a replay) is claimed and computed again. The
    /// key stays locked until the transaction ends, so one key is answered by one
    /// transaction at a time.
    fn claim_version(
        &mut self,
        dienstverband_id: i32,
        periode_id: i32,
        versie: i64,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send;

    /// The collector: stores `a` if its version is newer than the stored result of its
    /// key, and completes the calculation log entry of the dialog `handle`.
    fn store_antwoord(
        &mut self,
        handle: Uuid,
        a: &Antwoord,
        superseded: bool,
    ) -> impl Future<Output = Result<Stored, BrokerError>> + Send;

    /// The collector: records why the dialog `handle` got no answer (a Fout's reason,
    /// an error end), and whether it was the environment's fault (`repairable`: an
    /// internal Fout, an error end), so that the sweep sends the same version again.
    fn record_fout(
        &mut self,
        handle: Uuid,
        message: &str,
        repairable: bool,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// The collector: records a Fout (or an unreadable answer), which answers one
    /// request: the oldest still open on the dialog. On a reused dialog the requests
    /// sent after it are lost with the dialog (repairable). Where every dialog carries
    /// one request, as [`record_fout`](Self::record_fout).
    fn record_request_fout(
        &mut self,
        handle: Uuid,
        message: &str,
        repairable: bool,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        self.record_fout(handle, message, repairable)
    }

    /// The collector, on a reused dialog's DialogTimer: true when the key has had no
    /// request open on it for the idle time and the dialog is to be ended (it is no
    /// longer the key's); false to keep it. Never true where dialogs are not reused.
    fn dialog_idle(&mut self, handle: Uuid) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        let _ = handle;
        async { Ok(false) }
    }
}
