//! This node in a fleet: its name, and its heartbeat in the roll call
//! ([`crate::store::roll_call`]) that every node's console reads.

use crate::config::Config;
use crate::node::state::NodeState;
use crate::store::roll_call;

/// The node's name in the fleet: its host's name and its main listener's
/// port, so two nodes on one host (or one node restarted) are told apart as
/// an operator would tell them apart.
pub fn node_name(config: &Config) -> String {
    let port = config
        .listen
        .rsplit_once(':')
        .map(|(_, port)| port)
        .unwrap_or(config.listen.as_str());
    format!("{}:{port}", host_name())
}

/// The kernel's host name (the node runs on Linux; no `unsafe` for `gethostname`).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Write this node's heartbeat every [`roll_call::BEAT`] while it runs.
pub async fn heartbeat(state: NodeState, node: String) {
    let mut every = tokio::time::interval(roll_call::BEAT);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        every.tick().await;
        let (_, health) = crate::health::report(&state).await;
        match roll_call::beat(&state.store, &node, health).await {
            Ok(()) => failing = false,
            // The store's outage is said by /health and the store; once here is enough.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "cannot write this node's heartbeat to the fleet");
            }
            Err(_) => {}
        }
    }
}
