//! The rules of the configuration serde cannot express: ranges, and how keys relate.

use super::{BrokerKind, Config, ConfigError, key_error, mask_secrets};

impl Config {
    /// The rules serde cannot express.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.broker.connection.trim().is_empty() {
            return Err(key_error("broker.connection", "is empty: give the database to connect to"));
        }
        if self.broker.kind == BrokerKind::Mssql && self.sweep.interval_ms > 0 {
            return Err(key_error(
                "sweep.interval_ms",
                "the worker sweeps PostgreSQL only; on SQL Server schedule sbworker sweep --mssql (a systemd timer) or EXEC Rekenserver.sweep (SQL Agent)",
            ));
        }
        let w = &self.worker;
        if !(1..=3).contains(&w.max_attempts) {
            return Err(key_error(
                "worker.max_attempts",
                format!(
                    "is {}, must be 1 to 3 (the broker disables a queue after 5 rolled-back receives; \
                     diverting needs up to two more)",
                    w.max_attempts
                ),
            ));
        }
        if w.retry_min_delay_ms == 0 || w.retry_min_delay_ms > w.retry_max_delay_ms {
            return Err(key_error(
                "worker.retry_min_delay_ms",
                format!("is {}, must be at least 1 and at most worker.retry_max_delay_ms", w.retry_min_delay_ms),
            ));
        }
        for (key, v) in [
            ("worker.reconnect_max_delay_ms", w.reconnect_max_delay_ms),
            ("worker.disabled_recheck_ms", w.disabled_recheck_ms),
            ("worker.scale_interval_ms", w.scale_interval_ms),
            ("worker.idle_exit_ms", w.idle_exit_ms),
            ("worker.transient_alert_ms", w.transient_alert_ms),
        ] {
            if v == 0 {
                return Err(key_error(key, "must be above 0"));
            }
        }
        if self.queues.is_empty() {
            return Err(key_error("queues", "no queue is configured: add a [queues.NAME] section with a handler"));
        }
        for (name, q) in &self.queues {
            let key = |k: &str| format!("queues.{name}.{k}");
            if q.max_readers == 0 || q.max_readers > 256 {
                return Err(key_error(key("max_readers"), format!("is {}, must be 1 to 256", q.max_readers)));
            }
            if q.min_readers > q.max_readers {
                return Err(key_error(
                    key("min_readers"),
                    format!("is {}, above max_readers ({})", q.min_readers, q.max_readers),
                ));
            }
            if q.connection.as_deref().is_some_and(|c| c.trim().is_empty()) {
                return Err(key_error(
                    key("connection"),
                    "is empty: give the database this queue is in, or leave the key out for [broker]'s",
                ));
            }
            if q.batch == 0 || q.batch > 10_000 {
                return Err(key_error(key("batch"), format!("is {}, must be 1 to 10000", q.batch)));
            }
            if q.wait_ms == 0 || q.wait_ms > 20_000 {
                return Err(key_error(
                    key("wait_ms"),
                    format!("is {}, must be 1 to 20000 (keep waits below command timeouts)", q.wait_ms),
                ));
            }
            if q.groups_per_transaction == 0 || q.groups_per_transaction > 1_000 {
                return Err(key_error(
                    key("groups_per_transaction"),
                    format!("is {}, must be 1 to 1000", q.groups_per_transaction),
                ));
            }
            if q.groups_per_transaction > 1 && self.worker.max_attempts < 2 {
                return Err(key_error(
                    key("groups_per_transaction"),
                    format!(
                        "is {}, which needs worker.max_attempts of 2 or more: a worker that dies in a transaction of \
                         several groups leaves an attempt on each of them, and with 1 a group would be set aside for \
                         another's death",
                        q.groups_per_transaction
                    ),
                ));
            }
            if q.groups_per_transaction > 1 && self.worker.allow_broker_poison_detection {
                return Err(key_error(
                    key("groups_per_transaction"),
                    format!(
                        "is {}, which cannot go with worker.allow_broker_poison_detection: a transaction of several \
                         groups that rolls back counts a rollback against every message in it, and the broker \
                         disables the queue after five",
                        q.groups_per_transaction
                    ),
                ));
            }
            if q.transaction_window_ms > 10_000 {
                return Err(key_error(
                    key("transaction_window_ms"),
                    format!(
                        "is {}, must be 0 to 10000 (a group received early waits that long for its commit)",
                        q.transaction_window_ms
                    ),
                ));
            }
        }
        let sw = &self.sweep;
        for (key, v) in [
            ("sweep.fuse", sw.fuse),
            ("sweep.batch", i64::from(sw.batch)),
            ("sweep.retention_days", i64::from(sw.retention_days)),
            ("sweep.evidence_retention_months", i64::from(sw.evidence_retention_months)),
            ("sweep.delete_batch", sw.delete_batch),
        ] {
            if v < 1 {
                return Err(key_error(key, format!("is {v}, must be at least 1")));
            }
        }
        // A hundred years: more would overflow SQL Server's date arithmetic (Msg 517).
        if sw.evidence_retention_months > 1200 {
            return Err(key_error(
                "sweep.evidence_retention_months",
                format!("is {}, must be at most 1200 (a hundred years)", sw.evidence_retention_months),
            ));
        }
        if self.engine.max_body_bytes == 0 {
            return Err(key_error("engine.max_body_bytes", "must be above 0"));
        }
        Ok(())
    }

    /// Every queue names one of `known` handlers.
    pub fn check_handlers(&self, known: &[&str]) -> Result<(), ConfigError> {
        for (name, q) in &self.queues {
            if !known.contains(&q.handler.as_str()) {
                return Err(key_error(
                    format!("queues.{name}.handler"),
                    format!("\"{}\" is not a handler; known: {}", q.handler, known.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// The effective configuration as TOML, with secrets masked.
    pub fn to_masked_toml(&self) -> String {
        let mut shown = self.clone();
        shown.broker.connection = mask_secrets(&shown.broker.connection);
        for q in shown.queues.values_mut() {
            q.connection = q.connection.as_deref().map(mask_secrets);
        }
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }
}
