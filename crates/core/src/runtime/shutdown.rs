//! Graceful shutdown as one small type. The first SIGTERM or SIGINT asks the
//! process to drain (stop taking work, finish what is in hand); a second one
//! asks it to stop at once. Tests trigger it directly.

use tokio::sync::watch;

/// A shutdown signal shared by every task of a process. Cloning shares it.
#[derive(Clone)]
pub struct Shutdown {
    /// How many times shutdown was requested (0 = keep running).
    tx: watch::Sender<u32>,
    rx: watch::Receiver<u32>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        let (tx, rx) = watch::channel(0);
        Shutdown { tx, rx }
    }

    /// Turns SIGTERM and SIGINT into requests (first: drain; second: now).
    pub fn listen_for_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                tracing::error!("cannot listen for signals; stop this process with SIGKILL");
                return;
            };
            loop {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                this.trigger();
                if this.count() >= 2 {
                    tracing::warn!("second signal: stopping now");
                    return;
                }
                tracing::info!("signal received: draining (send another to stop at once)");
            }
        });
    }

    /// Requests shutdown (once more).
    pub fn trigger(&self) {
        self.tx.send_modify(|n| *n += 1);
    }

    /// How many times shutdown was requested.
    pub fn count(&self) -> u32 {
        *self.rx.borrow()
    }

    pub fn is_requested(&self) -> bool {
        self.count() > 0
    }

    /// Resolves once shutdown has been requested at least `times` times.
    pub async fn requested(&self, times: u32) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|n| *n >= times).await;
    }
}
