//! What a stopping worker still owes its attempt counts: the groups in flight when
//! shutdown aborted them (the grace period ran out, or a second signal), and failure
//! notes a reader could not write before it stopped. Both are the environment's doing,
//! so after its readers are gone the worker writes them as transient failures, and an
//! interrupted message does not move toward diversion (a crash still counts: then
//! nothing is left to write them).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::transport::{Fault, MessageKey};

/// A failure note to write: the keys, the error text, whose fault.
pub type Note = (Vec<MessageKey>, String, Fault);

#[derive(Debug, Default)]
pub struct Unfinished {
    next: AtomicU64,
    in_flight: Mutex<HashMap<u64, Vec<MessageKey>>>,
    notes: Mutex<Vec<Note>>,
}

impl Unfinished {
    /// A group's counted attempt begins; `end` it when its transaction is over, whatever
    /// the outcome. One never ended was aborted.
    pub fn begin(&self, keys: Vec<MessageKey>) -> u64 {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(token, keys);
        token
    }

    pub fn end(&self, token: u64) {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&token);
    }

    /// A note a reader could not write before it stopped.
    pub fn keep(&self, note: Note) {
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(note);
    }

    /// Everything owed: the kept notes, and each aborted group as a transient failure.
    pub fn take(&self) -> Vec<Note> {
        let mut out = std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()));
        let aborted = std::mem::take(&mut *self.in_flight.lock().unwrap_or_else(|e| e.into_inner()));
        out.extend(
            aborted
                .into_values()
                .map(|keys| (keys, "interrupted by the worker's shutdown (not counted)".to_owned(), Fault::Transient)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn groups_never_ended_are_owed_as_transient_with_the_kept_notes() {
        let u = Unfinished::default();
        let key = |s| MessageKey { conversation_handle: Uuid::nil(), sequence: s };
        let done = u.begin(vec![key(1)]);
        let _aborted = u.begin(vec![key(2)]);
        u.end(done);
        u.keep((vec![key(3)], "deadlock".into(), Fault::Transient));
        let owed = u.take();
        assert_eq!(owed.len(), 2);
        assert_eq!(owed[0].0, vec![key(3)]);
        assert_eq!((owed[1].0.clone(), owed[1].2), (vec![key(2)], Fault::Transient));
        assert!(u.take().is_empty(), "taken once");
    }
}
