//! The worker's heartbeat: every `worker.heartbeat_ms` it records, on a session of its
//! own, that this instance is alive (host, pid, version, start, readers and busy readers
//! per queue), and removes the record when the worker stops. `sbworker status` reads
//! these records; a failed beat is logged and tried again at the next one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{debug, warn};
use uuid::Uuid;

use super::QueueCtx;
use crate::shutdown::Stop;
use crate::transport::{Heartbeat, Session, Transport};

/// This process's identity, fixed at start.
pub(super) fn identity() -> Heartbeat {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into());
    Heartbeat {
        instance: Uuid::new_v4(),
        host,
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        version: env!("CARGO_PKG_VERSION"),
        contract_versie: Some(crate::transport::CONTRACT_VERSIE),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
        queues: Vec::new(),
        interval_ms: 0,
    }
}

/// Beats every `every` until `stop`, then removes the record (best effort, bounded).
pub(super) async fn beat<T: Transport>(
    transport: Arc<T>,
    queues: Vec<Arc<QueueCtx<T>>>,
    mut me: Heartbeat,
    every: Duration,
    mut stop: Stop,
) {
    let mut session: Option<T::Session> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.stopped() => break,
        }
        me.queues = queues
            .iter()
            .map(|q| (q.name.clone(), q.readers.load(Ordering::SeqCst), q.busy.load(Ordering::SeqCst)))
            .collect();
        // A beat never holds up a stop, and one that hangs (a half-open connection) is
        // given up after an interval: the next one opens a new session.
        let result = tokio::select! {
            r = tokio::time::timeout(every, async {
                if session.is_none() {
                    session = Some(transport.open().await?);
                }
                session.as_mut().expect("opened above").heartbeat(&me).await
            }) => r,
            _ = stop.stopped() => break,
        };
        match result {
            Ok(Ok(())) => debug!(instance = %me.instance, "heartbeat"),
            Ok(Err(e)) => {
                warn!(instance = %me.instance, "cannot record the heartbeat (sbworker status will not see this worker): {e}");
                session = None;
            }
            Err(_) => {
                warn!(instance = %me.instance, "the heartbeat took longer than its interval; trying again on a new session");
                session = None;
            }
        }
    }
    let end = async {
        let mut s = match session {
            Some(s) => s,
            None => transport.open().await?,
        };
        s.heartbeat_end(me.instance).await
    };
    // Bounded: the worker's exit waits for this at most two seconds.
    match tokio::time::timeout(Duration::from_secs(2), end).await {
        Ok(Ok(())) => debug!(instance = %me.instance, "heartbeat removed"),
        Ok(Err(e)) => warn!(instance = %me.instance, "cannot remove the heartbeat: {e}"),
        Err(_) => warn!(instance = %me.instance, "cannot remove the heartbeat: timed out"),
    }
}
