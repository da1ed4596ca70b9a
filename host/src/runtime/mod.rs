//! The plugin runtime: WebAssembly components loaded with wasmtime, routed by
//! what their manifests declare, swapped atomically on reload.
//!
//! A request never pays compilation: components are compiled (or loaded from
//! the on-disk cache) off the request path and pre-linked into an
//! `InstancePre`; each call instantiates from it in a pooled slot, runs under
//! its limits, and drops the store. A plugin that loops, grows memory without
//! bound, traps or returns too much fails only its own call. A plugin whose
//! manifest asks for `warm` instances is served from a bounded pool of reused
//! instances instead ([`warm`] documents what that may leak).
//!
//! A call runs under one of `plugins.max_concurrent_calls` node-wide slots, but
//! gives it up while it waits on the host for something slow and external — a
//! human's approval of a tool, the tool itself, an outbound call — so people
//! who never answer cannot starve every transport. Such a call is *parked*:
//! its instance stays alive, so at most `plugins.max_parked_calls` may be
//! parked at once; a tool needing an approval beyond that fails at once, and
//! other waits keep their slot instead ([`host_env::HostEnv::while_parked`]).
//!
//! This file is the façade; the work is split by job:
//! - [`loader`]: reading, compiling and swapping in plugin files, and the
//!   install records that decide when a plugin's data is deleted;
//! - [`invoke`]: the call path, from a transport's [`Call`] to the reply;
//! - [`tools`]: tool calls from plugins and their lifecycle;
//! - [`approval`]: every pending approval, whichever transport asks its human;
//! - [`error`]: why a load, a call or a tool call failed.
//!
//! Ownership runs one way: the runtime owns the registry, the registry its
//! plugins, a plugin its warm pool, the pool its instances. An instance holds
//! what its host calls need ([`host_env::HostEnv`]) and only a weak handle back
//! to the runtime (to run tools), so dropping the last [`Runtime`] frees every
//! plugin version and every idle warm instance with it.

pub mod approval;
pub mod bindings;
pub mod capabilities;
mod engine;
pub mod error;
pub mod events;
pub mod exchange;
pub mod fleet_plugins;
mod host_api;
mod host_env;
mod http;
mod instance;
mod invoke;
mod llm;
mod loader;
pub mod manifest;
pub mod prompts;
mod registry;
mod schedules;
mod settings;
mod stdio;
mod streaming;
mod tools;
mod warm;
pub mod watcher;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Serialize;
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

pub use approval::{ApprovalAsked, ApprovalOutcome, ApprovalRequest, Approvals, Approver, Caller};
use bindings::{Plugin, PluginPre};
pub use error::{InvokeError, LoadError, ToolError};
pub use events::{CallEvent, PluginEvent};
pub use exchange::Exchange;
pub use llm::{TokensUsed, UsageToday};
pub use manifest::PluginManifest;
pub use registry::Registry;
pub use streaming::{EventSink, EventStream, event_channel};

/// Kept at their old paths for callers of the runtime; they live in [`crate::vocab`].
pub use crate::vocab::{Call, FailureKind, Phase, Risk, TransportKind};

use crate::config::{Config, ToolsConfig};
use crate::metrics::Metrics;
use crate::peers::mcp::McpServers;
use crate::store::Store;
use host_env::HostEnv;

/// A plugin ready to serve: its validated manifest and pre-linked component.
pub struct LoadedPlugin {
    pub file: PathBuf,
    pub manifest: PluginManifest,
    /// SHA-256 of the `.wasm` file, hex.
    pub content_hash: String,
    pub loaded_at_ms: u64,
    /// The `.wasm` file's size in bytes.
    pub size: u64,
    /// How long compiling it took (or loading it from the compile cache).
    pub compile_ms: u64,
    /// `rust`, `python` or `javascript`, when its toolchain says ([`loader`]).
    pub language: Option<&'static str>,
    /// What the plugin asks beyond answering messages (its optional `extensions` export).
    pub capabilities: capabilities::Capabilities,
    pre: PluginPre<instance::PluginState>,
    /// Where `handle` and `run-tool` are, for fresh instances.
    exports: bindings::CallExports,
    /// Where the `extensions` export's functions are, when the plugin has it.
    agent: Option<bindings::agent::exports::agora::node::extensions::GuestIndices>,
    /// Reused instances when the manifest asks for `warm`; dropped with this version.
    warm: Option<Arc<warm::WarmPool>>,
}

/// Why a plugin file did not load, and the content it failed on (none when
/// it could not be read), so the same bytes are not compiled again.
struct FailedLoad {
    content_hash: Option<String>,
    error: String,
}

/// Shared state behind [`Runtime`] handles.
pub struct RuntimeInner {
    engine: Engine,
    linker: Linker<instance::PluginState>,
    registry: RwLock<Arc<Registry>>,
    /// Bumped after every change of the registry (MCP's `tools/list_changed`).
    registry_changes: tokio::sync::watch::Sender<u64>,
    load_errors: RwLock<BTreeMap<PathBuf, FailedLoad>>,
    /// Held by the reload running, so the same file is never compiled twice at once.
    reloading: tokio::sync::Mutex<()>,
    /// The start-up load, while it runs: what is still to compile.
    progress: RwLock<StartProgress>,
    /// What the host functions of a running call reach; shared with every instance.
    pub(crate) host: Arc<HostEnv>,
    tools: ToolsConfig,
    /// The MCP servers plugins may call tools of (`[mcp.servers]`).
    mcp_servers: McpServers,
    metrics: Metrics,
    _ticker: engine::EpochTicker,
}

#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

/// How far the start-up load ([`Runtime::load_all`]) has come.
#[derive(Default)]
struct StartProgress {
    starting: bool,
    pending: BTreeSet<PathBuf>,
    compiling: BTreeSet<PathBuf>,
}

/// Where one plugin file stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadState {
    /// Found at start-up, not compiled yet.
    Pending,
    Compiling,
    Loaded,
    Failed,
}

/// A plugin's line in `/health`.
#[derive(Debug, Serialize)]
pub struct PluginStatus {
    pub file: String,
    pub state: LoadState,
    pub name: Option<String>,
    pub version: Option<String>,
    pub routes: Vec<String>,
    /// SHA-256 of the serving file: what tells whether the nodes of a fleet run
    /// the same plugin, whatever its manifest's version says.
    pub content_sha256: Option<String>,
    pub error: Option<String>,
}

impl Runtime {
    pub fn new(config: Arc<Config>, store: Store, metrics: Metrics) -> wasmtime::Result<Runtime> {
        let engine = engine::build_engine(&config.plugins)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Outgoing HTTP only (no incoming handler): every request through `http::PluginHttp`.
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let ticker = engine::EpochTicker::start(&engine);
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                linker,
                registry: RwLock::new(Arc::new(Registry::default())),
                registry_changes: tokio::sync::watch::Sender::new(0),
                load_errors: RwLock::new(BTreeMap::new()),
                reloading: tokio::sync::Mutex::new(()),
                progress: RwLock::default(),
                tools: config.tools.clone(),
                mcp_servers: McpServers::from_config(&config),
                host: Arc::new(HostEnv::new(config, store, metrics.clone())),
                metrics,
                engine,
                _ticker: ticker,
            }),
        })
    }

    /// The current registry. Hold it for the whole request: it is the version the request runs on.
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.registry.read().clone()
    }

    /// A receiver that sees every change of the registry (a plugin loaded,
    /// replaced or removed) after it took effect.
    pub fn registry_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.registry_changes.subscribe()
    }

    /// Tell watchers of [`Runtime::registry_changes`] the registry changed.
    fn registry_changed(&self) {
        self.inner
            .registry_changes
            .send_modify(|generation| *generation += 1);
    }

    /// The runtime an instance belongs to, while it lives: instances, timers and
    /// hooks hold it weakly (see the module doc), and each reaches it through this.
    pub(crate) fn from_weak(runtime: &std::sync::Weak<RuntimeInner>) -> Option<Runtime> {
        runtime.upgrade().map(|inner| Runtime { inner })
    }

    /// The version of the plugin named `plugin` serving now: what a call is
    /// checked against (its declared capabilities, say).
    pub(crate) fn loaded(&self, plugin: &str) -> Option<Arc<LoadedPlugin>> {
        self.registry().by_name(plugin).cloned()
    }

    /// The node's one Almanac resolver, when `uagents.almanac_api` is set.
    pub fn almanac(&self) -> Option<Arc<crate::peers::almanac::Resolver>> {
        self.inner.host.almanac.clone()
    }

    /// The configuration the runtime started with.
    pub fn config_snapshot(&self) -> Config {
        (*self.inner.host.node_config).clone()
    }

    /// Swap in every plugin's `[plugins.NAME.*]` settings for the calls that
    /// start from now on; the names of the plugins whose settings changed.
    pub fn replace_plugin_settings(
        &self,
        settings: BTreeMap<String, crate::config::PluginSettings>,
    ) -> Vec<String> {
        self.inner.host.settings.replace(settings)
    }

    pub fn plugins_dir(&self) -> &Path {
        &self.inner.host.config.dir
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Today's model tokens per plugin and per caller, with the day's limits.
    pub async fn model_usage_today(&self) -> Result<UsageToday, crate::store::StoreError> {
        self.inner.host.llm.usage_today().await
    }

    /// Every approval waiting for a human: where transports deliver their clients' answers.
    pub fn approvals(&self) -> &Approvals {
        &self.inner.host.approvals
    }

    /// Whether the start-up load is still running: plugins found in the
    /// folder may not be serving yet.
    pub fn is_starting(&self) -> bool {
        self.inner.progress.read().starting
    }

    /// What a transport that found no plugin for a request asks first: while
    /// the start-up load runs, the plugin may simply not be compiled yet, so
    /// the answer is "unavailable, try again" — [`InvokeError::Starting`],
    /// which every transport maps to its protocol's 503 (with `Retry-After`
    /// where HTTP) and a message saying the node is still loading — rather
    /// than "unknown".
    pub fn not_found_yet(&self) -> Result<(), InvokeError> {
        if self.is_starting() {
            Err(InvokeError::Starting)
        } else {
            Ok(())
        }
    }

    /// Every plugin file and how it stands, for `/health`.
    pub fn status(&self) -> Vec<PluginStatus> {
        let registry = self.registry();
        let errors = self.inner.load_errors.read();
        let progress = self.inner.progress.read();
        let unknown = |file: &Path, state| PluginStatus {
            file: file.display().to_string(),
            state,
            name: None,
            version: None,
            routes: Vec::new(),
            content_sha256: None,
            error: None,
        };
        let mut statuses: BTreeMap<PathBuf, PluginStatus> = BTreeMap::new();
        for plugin in registry.plugins() {
            statuses.insert(
                plugin.file.clone(),
                PluginStatus {
                    file: plugin.file.display().to_string(),
                    state: LoadState::Loaded,
                    name: Some(plugin.manifest.name.clone()),
                    version: Some(plugin.manifest.version.clone()),
                    routes: plugin.manifest.routes(),
                    content_sha256: Some(plugin.content_hash.clone()),
                    error: None,
                },
            );
        }
        for (file, failed) in errors.iter() {
            let status = statuses
                .entry(file.clone())
                .or_insert_with(|| unknown(file, LoadState::Failed));
            status.error = Some(failed.error.clone());
        }
        // A file being compiled again (a new version) says so, whatever served before.
        for (files, state) in [
            (&progress.pending, LoadState::Pending),
            (&progress.compiling, LoadState::Compiling),
        ] {
            for file in files {
                statuses
                    .entry(file.clone())
                    .or_insert_with(|| unknown(file, state))
                    .state = state;
            }
        }
        statuses.into_values().collect()
    }
}
