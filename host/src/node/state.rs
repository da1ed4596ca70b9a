//! What every request handler can reach: the node's configuration, plugin
//! runtime and store, its background tasks, and when it started.
//!
//! It is built where the node is assembled ([`super::Node::start`]) but sits
//! in its own layer, below the transports and `/health` that take it, so they
//! need nothing else of the node.

use std::sync::Arc;
use std::time::Instant;

use crate::background::Background;
use crate::config::Config;
use crate::policy::browser::BrowserPolicy;
use crate::runtime::Runtime;
use crate::store::Store;

/// What every transport handler can reach.
#[derive(Clone)]
pub struct NodeState {
    pub config: Arc<Config>,
    pub runtime: Runtime,
    pub store: Store,
    pub started: Instant,
    /// What web pages may reach; every endpoint a browser can use guards with it.
    pub browser: Arc<BrowserPolicy>,
    /// Where a transport starts a task that outlives its requests, so shutdown ends it.
    pub background: Background,
    /// Turns true when the node begins to stop: a stream that can end in a
    /// way its client takes as "come back later" (an MCP listen's result)
    /// ends so, rather than being cut when the drain's grace runs out.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}
