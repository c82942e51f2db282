//! The groups of one queue that are waiting to be tried again after a transient failure
//! (the environment's fault), and since when: for `/metrics` and `/readyz`, so an
//! outage longer than the retry backoff shows instead of passing silently.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

/// Group → when its first transient failure in a row happened.
#[derive(Debug, Default)]
pub struct TransientWaits {
    since: Mutex<HashMap<Uuid, Instant>>,
}

impl TransientWaits {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Instant>> {
        self.since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A transient failure of `group` (the first one in a row starts its wait).
    pub fn begin(&self, group: Uuid) {
        self.map().entry(group).or_insert_with(Instant::now);
    }

    /// `group` was handled, or is no longer this reader's to retry.
    pub fn end(&self, group: Uuid) {
        self.map().remove(&group);
    }

    /// How many groups wait, and the longest wait.
    pub fn snapshot(&self) -> (usize, Duration) {
        let map = self.map();
        let oldest = map.values().map(|t| t.elapsed()).max().unwrap_or_default();
        (map.len(), oldest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_runs_from_the_first_failure_until_the_group_is_done() {
        let w = TransientWaits::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        w.begin(a);
        tokio::time::advance(Duration::from_secs(5)).await;
        w.begin(a);
        w.begin(b);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(w.snapshot(), (2, Duration::from_secs(6)));
        w.end(a);
        assert_eq!(w.snapshot(), (1, Duration::from_secs(1)));
        w.end(b);
        assert_eq!(w.snapshot(), (0, Duration::ZERO));
    }
}
