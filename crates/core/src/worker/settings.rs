//! The worker's settings, resolved once from the configuration at the edge: durations
//! as [`Duration`]s, counts in the types the broker takes, the retry policies built,
//! and nothing the worker does not use (not the connection string, the log or the
//! engine's settings). [`Settings::from_config`] is the one place that reads
//! [`Config`] for the worker.

use std::net::SocketAddr;
use std::time::Duration;

use super::retry::RetryPolicy;
use crate::config::Config;

/// One queue the worker serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    pub name: String,
    /// The registered handler that takes its messages.
    pub handler: String,
    pub min_readers: u32,
    pub max_readers: u32,
    /// Most messages one RECEIVE takes (`TOP (n)`).
    pub batch: i32,
    /// How long one `WAITFOR (RECEIVE …)` waits.
    pub wait: Duration,
    /// Most groups one transaction takes.
    pub groups_per_transaction: usize,
    /// How long a transaction goes on taking groups after its first.
    pub transaction_window: Duration,
}

/// Everything [`run`](super::run) needs, and only that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub queues: Vec<Queue>,
    /// Failed attempts of a message, as the broker counts them, before it is diverted.
    pub max_attempts: i32,
    /// Between attempts of a group: doubling with jitter, from the minimum to the maximum.
    pub retry: RetryPolicy,
    /// Between attempts to reconnect.
    pub reconnect: RetryPolicy,
    pub shutdown_grace: Duration,
    pub disabled_recheck: Duration,
    pub scale_interval: Duration,
    pub idle_exit: Duration,
    pub transient_alert: Duration,
    pub allow_broker_poison_detection: bool,
    /// How often the worker records that it is alive; `None`: never.
    pub heartbeat: Option<Duration>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub http_listen: Option<SocketAddr>,
    /// Test hook: the first N groups pause before COMMIT until shutdown.
    pub pause_before_commit: u32,
}

impl Settings {
    /// These settings for the queues named in `names` only (the queues of one database,
    /// when a process serves several).
    pub fn only(&self, names: &[String]) -> Self {
        Self { queues: self.queues.iter().filter(|q| names.contains(&q.name)).cloned().collect(), ..self.clone() }
    }

    /// The worker's part of a (checked) configuration.
    pub fn from_config(c: &Config) -> Self {
        let w = &c.worker;
        let ms = Duration::from_millis;
        let queues = c
            .queues
            .iter()
            .map(|(name, q)| Queue {
                name: name.clone(),
                handler: q.handler.clone(),
                min_readers: q.min_readers,
                max_readers: q.max_readers,
                // The configuration bounds it (1 to 10,000).
                batch: i32::try_from(q.batch).unwrap_or(i32::MAX),
                wait: ms(q.wait_ms),
                // The configuration bounds it (1 to 1,000).
                groups_per_transaction: usize::try_from(q.groups_per_transaction).unwrap_or(1),
                transaction_window: ms(q.transaction_window_ms),
            })
            .collect();
        Self {
            queues,
            // The configuration bounds it (1 to 3).
            max_attempts: i32::try_from(w.max_attempts).unwrap_or(i32::MAX),
            retry: RetryPolicy { min_delay: ms(w.retry_min_delay_ms), max_delay: ms(w.retry_max_delay_ms) },
            reconnect: RetryPolicy { min_delay: ms(w.retry_min_delay_ms), max_delay: ms(w.reconnect_max_delay_ms) },
            shutdown_grace: ms(w.shutdown_grace_ms),
            disabled_recheck: ms(w.disabled_recheck_ms),
            scale_interval: ms(w.scale_interval_ms),
            idle_exit: ms(w.idle_exit_ms),
            transient_alert: ms(w.transient_alert_ms),
            allow_broker_poison_detection: w.allow_broker_poison_detection,
            heartbeat: (w.heartbeat_ms > 0).then(|| ms(w.heartbeat_ms)),
            http_listen: c.http.listen,
            pause_before_commit: c.hooks.pause_before_commit,
        }
    }
}

impl From<&Config> for Settings {
    fn from(c: &Config) -> Self {
        Self::from_config(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_reads_its_part_of_the_configuration_once() {
        let c = crate::config::from_str(
            "[broker]\nkind = \"postgres\"\nconnection = \"host=x password=secret\"\n\
             [worker]\nheartbeat_ms = 0\nretry_min_delay_ms = 50\n\
             [queues.a]\nhandler = \"h\"\nbatch = 7\nwait_ms = 250\n",
            &Vec::new(),
        )
        .unwrap();
        let s = Settings::from_config(&c);
        assert_eq!(s.queues.len(), 1);
        let q = &s.queues[0];
        assert_eq!((q.name.as_str(), q.handler.as_str(), q.batch, q.wait), ("a", "h", 7, Duration::from_millis(250)));
        assert_eq!(s.heartbeat, None, "0 is never");
        assert_eq!(s.retry.min_delay, Duration::from_millis(50));
        assert_eq!(s.reconnect.min_delay, Duration::from_millis(50));
        assert_eq!(s.max_attempts, 3);
        // Nothing of the connection string reaches the worker.
        assert!(!format!("{s:?}").contains("secret"));
    }
}
