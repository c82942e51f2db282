//! The groups of one queue that are waiting to be tried again after a transient failure
//! (the environment's fault), and since when: for `/metrics` and `/readyz`, so an
//! outage longer than the retry backoff shows instead of passing silently.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

/// Group → when its first transient failure in a row happened, and its latest.
#[derive(Debug, Default)]
pub struct TransientWaits {
    since: Mutex<HashMap<Uuid, (Instant, Instant)>>,
}

impl TransientWaits {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, (Instant, Instant)>> {
        self.since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A transient failure of `group` (the first one in a row starts its wait).
    pub fn begin(&self, group: Uuid) {
        let now = Instant::now();
        self.map().entry(group).and_modify(|(_, last)| *last = now).or_insert((now, now));
    }

    /// `group` was handled (committed), or failed by its message's fault.
    pub fn end(&self, group: Uuid) {
        self.map().remove(&group);
    }

    /// How many groups wait, and the longest wait. A group with no transient failure for
    /// `stale_after` is no longer waiting here (another worker process may have taken
    /// and handled it): it is forgotten.
    pub fn snapshot(&self, stale_after: Duration) -> (usize, Duration) {
        let mut map = self.map();
        map.retain(|_, (_, last)| last.elapsed() < stale_after);
        let oldest = map.values().map(|(first, _)| first.elapsed()).max().unwrap_or_default();
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
        let stale = Duration::from_secs(10);
        w.begin(a);
        tokio::time::advance(Duration::from_secs(5)).await;
        w.begin(a);
        w.begin(b);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(w.snapshot(stale), (2, Duration::from_secs(6)));
        w.end(a);
        assert_eq!(w.snapshot(stale), (1, Duration::from_secs(1)));
        // No failure of b for the stale time: no longer waiting here.
        tokio::time::advance(stale).await;
        assert_eq!(w.snapshot(stale), (0, Duration::ZERO));
    }
}
