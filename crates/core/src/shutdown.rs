//! A stop signal shared by long-running tasks (the worker's readers, its HTTP server,
//! the emulator): one sender fires it, every clone sees it.

use tokio::sync::watch;

/// The stop signal every task listens to (the first stage of shutdown).
#[derive(Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// A stop signal and the sender that fires it.
    pub fn new() -> (watch::Sender<bool>, Stop) {
        let (tx, rx) = watch::channel(false);
        (tx, Stop(rx))
    }

    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once stop is requested (or its sender is gone).
    pub async fn stopped(&mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }
}
