//! The running node: state, plugins, hot reload and the HTTP listeners.
//!
//! Every transport shares the main listener unless its section names its own
//! `listen`; each listener bounds connections, headers, bodies and time (see
//! [`crate::listener`]). Shutdown (SIGINT, SIGTERM) stops accepting, lets
//! in-flight requests finish and stops the background tasks, all within
//! `http.shutdown_grace_ms`, hands the fleet leases of the work it cut over
//! (`store::lease::hand_over`), then flushes the store.

pub mod config_watch;
pub mod fleet;
mod observe;
pub mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::background::Background;
use crate::config::{Config, StoreBackend, parse_listen};
use crate::listener::{self, ListenerLimits};
use crate::metrics::Metrics;
use crate::runtime::fleet_plugins::FleetPlugins;
use crate::runtime::{Runtime, watcher};
use crate::store::Store;
use crate::store::postgres::PostgresBackend;
use crate::transports;
pub use state::NodeState;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot open the store in {path}: {source}")]
    Store {
        path: String,
        source: crate::store::StoreError,
    },
    #[error("cannot start the plugin runtime: {0}")]
    Runtime(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve TLS: {0}")]
    Tls(#[from] crate::listener::TlsError),
    #[error("cannot watch the plugins folder: {0}")]
    Watch(#[from] notify::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    OutboundTls(#[from] crate::peers::tls::TlsSetupError),
}

/// A node with its listeners bound, ready to serve.
pub struct Node {
    state: NodeState,
    listeners: Vec<(SocketAddr, TcpListener, Router)>,
    limits: ListenerLimits,
    tls: Option<listener::Tls>,
    /// Turns [`NodeState::stopping`] on when the node begins to stop.
    stop: watch::Sender<bool>,
    _watcher: Option<watcher::PluginWatcher>,
}

impl Node {
    /// Open the store, start loading the plugins in the background, start the
    /// watcher and bind every listener.
    pub async fn start(config: Config) -> Result<Node, NodeError> {
        let config = Arc::new(config);
        crate::peers::tls::init(&config.tls.ca_file)?;
        crate::peers::http_client::set_address_policy(crate::peers::http_client::address_policy(
            &config.outbound,
        )?);
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| NodeError::Runtime(format!("cannot create {}: {e}", config.data_dir.display())))?;
        std::fs::create_dir_all(&config.plugins.dir).map_err(|e| {
            NodeError::Runtime(format!("cannot create {}: {e}", config.plugins.dir.display()))
        })?;
        let metrics = Metrics::new();
        let commit_wait = metrics.store_commit_wait.clone();
        let store = open_store(&config)
            .await?
            .observing_commits(Arc::new(move |waited| commit_wait.observe(waited.as_secs_f64())));
        let config = if store.is_shared() && config.uagents.seed.is_empty() {
            // The fleet is one uAgent: every node signs as the address of one seed.
            let mut shared = (*config).clone();
            shared.uagents.seed = crate::transports::uagents::fleet_seed(&store)
                .await
                .map_err(|e| NodeError::Runtime(format!("cannot read the fleet's uAgents seed: {e}")))?;
            Arc::new(shared)
        } else {
            config
        };
        let runtime = Runtime::new(config.clone(), store.clone(), metrics.clone())
            .map_err(|e| NodeError::Runtime(format!("{e:#}")))?;
        let background = Background::new();
        let node_name = fleet::node_name(&config);
        let fleet_plugins = FleetPlugins::new(&runtime, &store, node_name.clone());
        if let Some(fleet_plugins) = &fleet_plugins {
            // Before the folder is listed: a node joining a fleet loads the fleet's set.
            fleet_plugins
                .join()
                .await
                .map_err(|e| NodeError::Runtime(e.to_string()))?;
            background.spawn("plugins.fleet", fleet_plugins.clone().follow());
        }
        // Compiling can take a minute on a cold cache: the listeners answer
        // meanwhile, `/health` saying "starting" with each plugin's progress.
        background.spawn("plugins.load", runtime.load_all());
        // Plugins' declared schedules, following every load and removal.
        background.spawn("plugins.schedules", runtime.run_schedules(background.clone()));
        let watcher = watcher::watch(runtime.clone(), fleet_plugins)?;
        let browser = crate::policy::browser::BrowserPolicy::new(&config);
        if let Some(warning) = browser.open_names_warning() {
            tracing::warn!("{warning}");
        }
        let (stop, stopping) = watch::channel(false);
        let state = NodeState {
            config: config.clone(),
            runtime,
            store: store.clone(),
            started: Instant::now(),
            browser: Arc::new(browser),
            background: background.clone(),
            stopping,
        };
        let every = Duration::from_secs(config.store.sweep_interval_secs.max(1));
        if store.is_shared() {
            background.spawn("fleet.heartbeat", fleet::heartbeat(state.clone(), node_name));
        }
        background.spawn("store.sweep", sweep(store, every));

        let mut routers: BTreeMap<SocketAddr, Router> = BTreeMap::new();
        let main = parse_listen("listen", &config.listen)?;
        let mut mount = |key: &'static str, listen: &str, router: Router| -> Result<(), NodeError> {
            let addr = if listen.is_empty() {
                main
            } else {
                parse_listen(key, listen)?
            };
            let merged = routers.remove(&addr).unwrap_or_default().merge(router);
            routers.insert(addr, merged);
            Ok(())
        };
        mount("listen", "", crate::health::router(state.clone()))?;
        mount("listen", "", crate::console::router(state.clone()))?;
        for transport in &transports::TRANSPORTS {
            let endpoint = (transport.endpoint)(&config);
            if endpoint.enabled {
                let (key, listen) = endpoint.listen;
                let metrics = state.runtime.metrics().clone();
                let router = observe::protocol(endpoint.protocol, metrics, (transport.router)(state.clone()));
                mount(key, listen, router)?;
            }
        }

        let tls = if config.tls.serves_tls() {
            let handshake_timeout = Duration::from_millis(config.http.header_timeout_ms);
            Some(listener::Tls::start(&config.tls, handshake_timeout)?)
        } else {
            None
        };
        let mut listeners = Vec::new();
        for (addr, router) in routers {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| NodeError::Listen { addr, source })?;
            let bound = listener
                .local_addr()
                .map_err(|source| NodeError::Listen { addr, source })?;
            let router = router
                .layer(DefaultBodyLimit::max(config.http.max_body_bytes))
                .layer(tower_http::timeout::TimeoutLayer::with_status_code(
                    axum::http::StatusCode::REQUEST_TIMEOUT,
                    Duration::from_millis(config.http.request_timeout_ms),
                ));
            let router = observe::layer(router, metrics.clone());
            listeners.push((bound, listener, router));
        }
        Ok(Node {
            state,
            listeners,
            limits: ListenerLimits::new(&config.http, metrics)
                .with_larger_bodies(crate::console::larger_bodies(&config)),
            tls,
            stop,
            _watcher: Some(watcher),
        })
    }

    /// The addresses actually bound (port 0 resolved).
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(addr, _, _)| *addr).collect()
    }

    /// `https` when the listeners serve TLS, else `http`.
    pub fn http_scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    pub fn state(&self) -> &NodeState {
        &self.state
    }

    /// Serve until `shutdown` resolves, then drain.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let stop_rx = self.stop.subscribe();
        let grace = Duration::from_millis(self.state.config.http.shutdown_grace_ms);
        let mut servers = Vec::new();
        for (addr, listener, router) in self.listeners {
            let (http, ws) = if self.tls.is_some() {
                ("https", "wss")
            } else {
                ("http", "ws")
            };
            tracing::info!(url = %format!("{http}://{addr}"), websocket = %format!("{ws}://{addr}"), "listening");
            servers.push(tokio::spawn(listener::serve(
                listener,
                router,
                self.limits.clone(),
                self.tls.clone(),
                stop_rx.clone(),
            )));
        }
        shutdown.await;
        tracing::info!("shutting down; draining in-flight requests");
        let deadline = Instant::now() + grace;
        self.stop.send_replace(true);
        let drain = futures::future::join_all(servers);
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "requests still running after the grace period"
            );
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let background = &self.state.background;
        let tasks = background.running();
        if background.stop(left).await {
            tracing::info!(tasks, "background tasks stopped");
        } else {
            let running = background.running();
            tracing::warn!(running, "background tasks still running after the grace period");
        }
        match crate::store::lease::hand_over(&self.state.store).await {
            Ok(0) => {}
            Ok(handed) => tracing::info!(
                handed,
                "leases: the work cut here is left to the fleet's next sweep"
            ),
            Err(error) => {
                tracing::warn!(%error, "leases: not handed over; other nodes take them when they run out")
            }
        }
        if let Err(error) = self.state.store.commit().await {
            tracing::error!(%error, "flushing the store at shutdown failed");
        }
        Ok(())
    }
}

/// The store `store.backend` names: sled under `data_dir/state`, or the
/// fleet's PostgreSQL database (schema migrated before the node serves).
pub async fn open_store(config: &Config) -> Result<Store, NodeError> {
    let store = match config.store.backend {
        StoreBackend::Sled => {
            let dir = config.data_dir.join("state");
            Store::open_bounded(
                &dir,
                crate::store::MemoryBounds {
                    max_claims: config.store.max_claims_in_memory,
                    max_keyed_bytes: config.store.max_keyed_bytes_in_memory,
                },
            )
            .map_err(|source| NodeError::Store {
                path: dir.display().to_string(),
                source,
            })?
        }
        StoreBackend::Postgres => {
            let backend = PostgresBackend::connect(&config.store, &config.tls.ca_file)
                .await
                .map_err(|source| NodeError::Store {
                    path: "store.postgres_url".into(),
                    source,
                })?;
            Store::new(Arc::new(backend))
        }
    };
    tracing::info!(backend = store.backend_name(), "store open");
    Ok(store.with_history_quota(config.store.max_history_bytes))
}

async fn sweep(store: Store, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    loop {
        ticker.tick().await;
        match store.sweep().await {
            Ok(removed) if removed > 0 => tracing::debug!(removed, "expired entries swept"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "sweeping expired entries failed"),
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
