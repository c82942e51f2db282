//! Encoding the messages to XML with serde (`quick_xml::se`).
//!
//! The model's serde attributes give element and attribute names; this module adds the
//! root element, its default namespace, and nothing else (no XML declaration: a body
//! goes into SQL Server `xml` as is, whatever encoding it is sent in).

use serde::Serialize;

use super::NAMESPACE;
use super::model::{Antwoord, RekenserverFout, Vraag};

/// Why encoding failed (only a bug can cause it: every model value is encodable).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode {root}: {source}")]
pub struct EncodeError {
    root: &'static str,
    #[source]
    source: quick_xml::SeError,
}

fn encode_into<T: Serialize>(
    out: &mut String,
    root: &'static str,
    value: &T,
) -> Result<(), EncodeError> {
    let at = out.len();
    let ser = quick_xml::se::Serializer::with_root(&mut *out, Some(root))
        .map_err(|source| EncodeError { root, source })?;
    value
        .serialize(ser)
        .map_err(|source| EncodeError { root, source })?;
    // The serializer wrote `<Root` first; declare the namespace right after the name.
    let ns = format!(" xmlns=\"{NAMESPACE}\"");
    out.insert_str(at + 1 + root.len(), &ns);
    Ok(())
}

/// Appends a LoonfactorBerekeningVraag to `out`.
pub fn encode_vraag_into(out: &mut String, v: &Vraag) -> Result<(), EncodeError> {
    encode_into(out, "LoonfactorBerekeningVraag", v)
}

/// Appends a LoonfactorBerekeningAntwoord to `out`.
pub fn encode_antwoord_into(out: &mut String, a: &Antwoord) -> Result<(), EncodeError> {
    encode_into(out, "LoonfactorBerekeningAntwoord", a)
}

/// Appends a RekenserverFout to `out`.
pub fn encode_fout_into(out: &mut String, f: &RekenserverFout) -> Result<(), EncodeError> {
    encode_into(out, "RekenserverFout", f)
}

/// Encodes a LoonfactorBerekeningVraag.
pub fn encode_vraag(v: &Vraag) -> Result<String, EncodeError> {
    let mut s = String::with_capacity(4096);
    encode_vraag_into(&mut s, v)?;
    Ok(s)
}

/// Encodes a LoonfactorBerekeningAntwoord.
pub fn encode_antwoord(a: &Antwoord) -> Result<String, EncodeError> {
    let mut s = String::with_capacity(256 + 200 * a.mutaties.len());
    encode_antwoord_into(&mut s, a)?;
    Ok(s)
}

/// Encodes a RekenserverFout.
pub fn encode_fout(f: &RekenserverFout) -> Result<String, EncodeError> {
    let mut s = String::with_capacity(512);
    encode_fout_into(&mut s, f)?;
    Ok(s)
}
