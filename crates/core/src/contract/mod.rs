//! The message contract: the XSDs in `schemas/` as Rust types, a strict decoder and
//! an encoder, and the Fout built from any decoding or calculation error.

mod body;
mod chars;
mod cursor;
mod decode;
mod encode;
mod error;
mod fout;
pub mod model;
pub mod values;

pub use body::{Limits, body_text};
pub use decode::{decode_antwoord, decode_fout, decode_vraag};
pub use encode::{
    encode_antwoord, encode_antwoord_into, encode_fout, encode_fout_into, encode_vraag, encode_vraag_into,
};
pub use error::{DecodeError, Details as DecodeErrorDetails};
pub use fout::fout_for;
pub use model::*;

/// The XML namespace of every message.
pub const NAMESPACE: &str = "http://www.sdbgroep.nl/MPlus/Rekenserver/2008";

/// The Vraag's contract version this worker knows (`ContractVersie`): 1 is the original
/// system's shape, 2 adds `Historie`, `Verlof` and the attribute itself. A Vraag of a
/// later version is refused with reason `newer-contract`, which the collector records as
/// the environment's fault: the sweep sends it again once the workers are upgraded.
pub const CONTRACT_VERSIE: u32 = 2;

/// Service Broker message type names of the calculation contract.
pub mod message_types {
    pub const VRAAG: &str = "/Rekenserver/LoonfactorBerekening/Vraag";
    pub const ANTWOORD: &str = "/Rekenserver/LoonfactorBerekening/Antwoord";
    pub const FOUT: &str = "/Rekenserver/Fout";
}

/// The contract of a key's reused dialog (conversation reuse, PostgreSQL broker): the
/// same messages as the others, but neither side ends the dialog with an answer; the
/// initiator ends it once the key has been idle (its conversation timer).
pub const SLEUTEL_CONTRACT: &str = "/Rekenserver/LoonfactorBerekening/SleutelContract";

/// The Waarschuwing code of an Antwoord that answers a superseded Vraag: it carries no
/// factors, and the collector stores nothing for it.
pub const VERVANGEN: &str = "vervangen";
