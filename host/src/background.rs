//! The node's background tasks — sweepers, fleet listeners, key refreshers,
//! stream senders, the Almanac registration, schedule runs — and the work a
//! request starts that outlives its response (an A2A task's run, a HAI turn),
//! owned in one place, so shutdown can end them all.
//!
//! A task spawned bare with `tokio::spawn` outlives whatever started it:
//! at shutdown it may still be writing to a store being flushed, or keep a
//! test's process busy. Each task spawned through [`Background`] instead
//! ends at the first of its own end and [`Background::stop`], which waits
//! for all of them within the time it is given (the node's drain deadline).
//! The node stops them only after its requests have drained, so a plugin call
//! still running then is cut at its next await and its instance dropped. What
//! it was for stays consistent: an A2A task left working reads as failed, from
//! the store, after a restart; a HAI turn sends no more frames, and its
//! session's history keeps what was committed before.
//! Work a response owns (a stream's feeder, a WebSocket's writer) is not
//! here: it ends with its response.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The node's background tasks; clones share them.
#[derive(Clone, Default)]
pub struct Background {
    tracker: TaskTracker,
    stopping: CancellationToken,
}

impl Background {
    pub fn new() -> Background {
        Background::default()
    }

    /// Run `task` until it ends or the node stops, whichever comes first;
    /// `name` says which task in the log when one has to be stopped.
    /// The handle only to end it sooner (`abort`); dropping it leaves the task running.
    pub fn spawn(
        &self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let stopping = self.stopping.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = task => {}
                () = stopping.cancelled() => tracing::debug!(task = name, "background task stopped"),
            }
        })
    }

    /// Stop every task and wait up to `within` for them to end; `false` when
    /// some did not (a task only stops at its next await).
    pub async fn stop(&self, within: Duration) -> bool {
        self.stopping.cancel();
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait()).await.is_ok()
    }

    /// How many tasks are running.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Set when the task's future is dropped: the task ended.
    struct Ended(Arc<AtomicBool>);

    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn stop_ends_a_task_that_would_run_forever_and_waits_for_it() {
        let background = Background::new();
        let ended = Arc::new(AtomicBool::new(false));
        let guard = Ended(ended.clone());
        background.spawn("forever", async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        background.spawn("finishes", async {});
        assert!(background.stop(Duration::from_secs(5)).await);
        assert!(ended.load(Ordering::SeqCst));
        assert_eq!(background.running(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_that_never_yields_to_the_stop_is_reported() {
        let background = Background::new();
        let (started, running) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        background.spawn("blocking", async move {
            let _ = started.send(());
            // Holds its thread without an await until released: no stop can reach it.
            let _ = released.recv();
        });
        running.await.unwrap();
        assert!(!background.stop(Duration::from_millis(50)).await);
        release.send(()).unwrap();
        assert!(background.stop(Duration::from_secs(5)).await);
    }
}
