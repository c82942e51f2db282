//! The decoder's error: what is wrong, where (element path, line and column), and the
//! stable reason code a Fout carries.

use uuid::Uuid;

use super::model::Reden;

/// Why a message body could not be decoded. The details are boxed so that the
/// decoder's `Result`s stay small on the success path; read them through `Deref`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.render())]
pub struct DecodeError(Box<Details>);

/// What a [`DecodeError`] holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Details {
    pub reden: Reden,
    /// Path from the root, e.g. `Diensten/Dienst[3]/Tijdblok[1]/@Einde`; empty for the
    /// document as a whole, the root's name for the root itself.
    pub path: String,
    /// What is wrong, e.g. `'25:00' is not a time hh:mm`.
    pub detail: String,
    /// 1-based line and column in the decoded text, where known.
    pub line: Option<u32>,
    pub column: Option<u32>,
    /// The message's `Id` when it was read before the error.
    pub message_id: Option<Uuid>,
}

impl std::ops::Deref for DecodeError {
    type Target = Details;
    fn deref(&self) -> &Details {
        &self.0
    }
}

impl std::ops::DerefMut for DecodeError {
    fn deref_mut(&mut self) -> &mut Details {
        &mut self.0
    }
}

impl DecodeError {
    pub(crate) fn new(reden: Reden, path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self(Box::new(Details {
            reden,
            path: path.into(),
            detail: detail.into(),
            line: None,
            column: None,
            message_id: None,
        }))
    }

    /// Sets line and column from a byte offset into `src`.
    pub(crate) fn at(mut self, src: &str, offset: u64) -> Self {
        let offset = (offset as usize).min(src.len());
        let mut cut = offset;
        while !src.is_char_boundary(cut) {
            cut -= 1;
        }
        let before = &src[..cut];
        let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        self.line = Some(line as u32);
        self.column = Some(column as u32);
        self
    }

    fn render(&self) -> String {
        let mut s = String::new();
        if !self.path.is_empty() {
            s.push_str(&self.path);
            s.push_str(": ");
        }
        s.push_str(&self.detail);
        if let (Some(l), Some(c)) = (self.line, self.column) {
            s.push_str(&format!(" (line {l}, column {c})"));
        }
        s
    }
}
