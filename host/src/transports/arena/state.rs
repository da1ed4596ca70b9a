//! What the arena transport holds (the AAP specification): the arena's
//! signing keys (§4, [`super::keys`]), the live event stream (§2,
//! [`super::stream`]), the slots that cap concurrent tasks, and the recent
//! latencies the §3 health reply averages.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::keys::KeyCache;
use super::stream::EventStream;
use crate::node::state::NodeState;

/// Served tasks the health average covers.
const LATENCY_WINDOW: usize = 50;
/// Everything the arena endpoints share.
pub(super) struct ArenaState {
    pub(super) node: NodeState,
    pub(super) keys: KeyCache,
    pub(super) stream: Option<Arc<EventStream>>,
    pub(super) slots: Arc<Semaphore>,
    latencies: Mutex<VecDeque<u64>>,
}

pub(super) type Shared = Arc<ArenaState>;

impl ArenaState {
    /// The arena state for `node`, with its signing keys loading in the
    /// background and reloaded on a schedule for as long as it lives.
    pub(super) fn start(node: NodeState) -> Shared {
        let config = &node.config.arena;
        let arena = Arc::new(ArenaState {
            keys: KeyCache::new(config),
            stream: EventStream::new(
                &config.stream_url,
                &config.stream_token,
                config.stream_buffer,
                node.runtime.metrics().clone(),
                &node.background,
            ),
            slots: Arc::new(Semaphore::new(config.max_concurrent)),
            latencies: Mutex::new(VecDeque::with_capacity(LATENCY_WINDOW)),
            node,
        });
        let preload = arena.clone();
        let background = &arena.node.background;
        background.spawn("arena.keys_preload", async move { preload.keys.preload().await });
        // The arena may rotate without ever sending a token with an unknown kid
        // (a withdrawn key must stop verifying too): reload on a schedule as well.
        let refresh = Arc::downgrade(&arena);
        let every = Duration::from_secs(arena.node.config.arena.jwks_refresh_secs);
        background.spawn("arena.keys_refresh", async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Some(arena) = refresh.upgrade() else { break };
                arena.keys.refresh().await;
            }
        });
        arena
    }

    pub(super) fn record_latency(&self, latency_ms: u64) {
        let mut latencies = self.latencies.lock();
        if latencies.len() == LATENCY_WINDOW {
            latencies.pop_front();
        }
        latencies.push_back(latency_ms);
    }

    pub(super) fn average_latency_ms(&self) -> u64 {
        let latencies = self.latencies.lock();
        if latencies.is_empty() {
            return 0;
        }
        let total: u64 = latencies.iter().sum();
        (total as f64 / latencies.len() as f64).round() as u64
    }
}
