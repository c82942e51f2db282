//! Delays between attempts: exponential with jitter and a cap (backon's builder), as a
//! function of the attempt number, so a retry is planned from the durable count.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// How long to wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl RetryPolicy {
    fn builder(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
    }

    /// The delay after failed attempt number `attempt` (1 = the first attempt failed):
    /// `min_delay · 2^(attempt-1)`, capped at `max_delay`, plus up to as much again of
    /// jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        let n = attempt.clamp(1, 64) as usize - 1;
        self.builder().build().nth(n).unwrap_or(self.max_delay)
    }

    /// Delays for reconnecting, forever (the caller stops on shutdown).
    pub fn reconnects(&self) -> impl Iterator<Item = Duration> + Send {
        self.builder().build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_with_jitter_and_stop_at_the_cap() {
        let p = RetryPolicy { min_delay: Duration::from_millis(100), max_delay: Duration::from_secs(1) };
        for _ in 0..50 {
            let d1 = p.delay(1);
            assert!(d1 >= Duration::from_millis(100) && d1 < Duration::from_millis(200), "{d1:?}");
            let d3 = p.delay(3);
            assert!(d3 >= Duration::from_millis(400) && d3 < Duration::from_millis(800), "{d3:?}");
            let d9 = p.delay(9);
            assert!(d9 >= Duration::from_secs(1) && d9 < Duration::from_secs(2), "{d9:?}");
        }
    }
}
