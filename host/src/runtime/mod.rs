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
//! other waits keep their slot instead ([`Runtime::while_parked`]).
//!
//! Plugin files are read only when they are regular files (a symlink to one is
//! followed), through a non-blocking open and a bounded read: a FIFO or a
//! symlink to a device in the plugins folder is refused with an error in
//! `/health`, never read. A plugin's key-value data belongs to its install —
//! its name at its file: removing the file (while the node runs, or before it
//! starts) deletes the data, so another plugin taking the name later starts
//! empty; replacing the file (a new version) keeps it.

pub mod bindings;
mod engine;
pub mod exchange;
mod host_api;
mod instance;
pub mod manifest;
mod registry;
mod stdio;
mod warm;
pub mod watcher;

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

pub use bindings::FailureKind;
use bindings::{Plugin, PluginPre};
pub use exchange::{ApprovalOutcome, ApprovalRequest, Approver, Exchange, PluginEvent};
pub use manifest::PluginManifest;
pub use registry::Registry;

use crate::config::{Config, PluginsConfig, ToolsConfig};
use crate::metrics::Metrics;
use crate::store::{Collection, Store, plugin_key};

/// The wire protocol a message arrived on (mirrors `types.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Agora,
    Envelope,
    Uagents,
    Arena,
    Hai,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Agora => "agora",
            TransportKind::Envelope => "envelope",
            TransportKind::Uagents => "uagents",
            TransportKind::Arena => "arena",
            TransportKind::Hai => "hai",
        }
    }
}

impl From<bindings::Transport> for TransportKind {
    fn from(transport: bindings::Transport) -> Self {
        match transport {
            bindings::Transport::Agora => TransportKind::Agora,
            bindings::Transport::Envelope => TransportKind::Envelope,
            bindings::Transport::Uagents => TransportKind::Uagents,
            bindings::Transport::Arena => TransportKind::Arena,
            bindings::Transport::Hai => TransportKind::Hai,
        }
    }
}

impl From<TransportKind> for bindings::Transport {
    fn from(transport: TransportKind) -> Self {
        match transport {
            TransportKind::Agora => bindings::Transport::Agora,
            TransportKind::Envelope => bindings::Transport::Envelope,
            TransportKind::Uagents => bindings::Transport::Uagents,
            TransportKind::Arena => bindings::Transport::Arena,
            TransportKind::Hai => bindings::Transport::Hai,
        }
    }
}

/// What the host asks of a plugin's `handle` (mirrors `types.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Handle,
    Quote,
    Execute,
}

/// A tool's risk level; tools at or above the configured threshold need approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
    Critical,
}

impl Risk {
    pub fn parse(text: &str) -> Option<Risk> {
        match text {
            "low" => Some(Risk::Low),
            "medium" => Some(Risk::Medium),
            "high" => Some(Risk::High),
            "critical" => Some(Risk::Critical),
            _ => None,
        }
    }
}

/// One inbound message for a plugin, as a transport hands it over.
#[derive(Debug, Clone)]
pub struct Call {
    pub transport: TransportKind,
    pub phase: Phase,
    pub route: String,
    pub sender: Option<String>,
    pub conversation: Option<String>,
    pub body: String,
}

/// Why a plugin call produced no reply. Transports map this to their wire shape.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("{message}")]
    Failure { kind: FailureKind, message: String },
    #[error("the plugin exceeded its execution time")]
    Timeout,
    #[error("the plugin exceeded its memory limit")]
    MemoryExceeded,
    #[error("the plugin failed: {0}")]
    Trapped(String),
    #[error("the plugin's reply is {size} bytes, over the {limit}-byte limit")]
    OutputTooLarge { size: usize, limit: usize },
    #[error("the node is overloaded; try again shortly")]
    Overloaded,
}

impl InvokeError {
    /// The `outcome` label of this error in `/metrics`.
    pub fn outcome(&self) -> &'static str {
        match self {
            InvokeError::Failure { .. } => "failure",
            InvokeError::Timeout => "timeout",
            InvokeError::MemoryExceeded => "memory",
            InvokeError::Trapped(_) => "trap",
            InvokeError::OutputTooLarge { .. } => "output_too_large",
            InvokeError::Overloaded => "overloaded",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("no tool named {0:?} is loaded")]
    Unknown(String),
    #[error("tool calls nest deeper than {0}")]
    TooDeep(u32),
    #[error("tool {0} needs a human's approval and this exchange has no human to ask")]
    NoApprover(String),
    #[error("tool {tool} was rejected{}", feedback.as_ref().map(|f| format!(": {f}")).unwrap_or_default())]
    Rejected { tool: String, feedback: Option<String> },
    #[error("approval of tool {0} timed out")]
    ApprovalTimedOut(String),
    #[error(
        "tool {tool} needs a human's approval and {limit} calls already wait on the node; try again later"
    )]
    TooManyWaiting { tool: String, limit: usize },
    #[error("tool {tool} failed: {message}")]
    Failed { tool: String, message: String },
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is {size} bytes, over the {limit}-byte limit")]
    TooLarge { path: PathBuf, size: u64, limit: u64 },
    #[error("{path} is not a regular file (a FIFO, device, socket or folder); only regular files are loaded")]
    NotAFile { path: PathBuf },
    #[error("{path} is not a valid plugin component: {message}")]
    Compile { path: PathBuf, message: String },
    #[error("{path}: invalid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("{0}")]
    Conflict(String),
}

/// A plugin ready to serve: its validated manifest and pre-linked component.
pub struct LoadedPlugin {
    pub file: PathBuf,
    pub manifest: PluginManifest,
    /// SHA-256 of the `.wasm` file, hex.
    pub content_hash: String,
    pub loaded_at_ms: u64,
    pre: PluginPre<instance::PluginState>,
    /// Reused instances when the manifest asks for `warm`; dropped with this version.
    warm: Option<Arc<warm::WarmPool>>,
}

/// Where one call runs: a fresh instance, or one leased from the plugin's warm pool.
enum CallInstance {
    Fresh(wasmtime::Store<instance::PluginState>, Plugin),
    Warm(warm::Lease),
}

impl CallInstance {
    fn parts(&mut self) -> (&mut wasmtime::Store<instance::PluginState>, &Plugin) {
        match self {
            CallInstance::Fresh(store, plugin) => (store, plugin),
            CallInstance::Warm(lease) => (&mut lease.instance.store, &lease.instance.plugin),
        }
    }
}

/// Shared state behind [`Runtime`] handles.
pub struct RuntimeInner {
    engine: Engine,
    linker: Linker<instance::PluginState>,
    registry: RwLock<Arc<Registry>>,
    load_errors: RwLock<BTreeMap<PathBuf, String>>,
    pub(crate) config: PluginsConfig,
    tools: ToolsConfig,
    pub(crate) node_config: Arc<Config>,
    pub(crate) store: Store,
    metrics: Metrics,
    call_slots: Arc<Semaphore>,
    /// Places for parked calls: `plugins.max_parked_calls`, at most half of
    /// `plugins.max_instances` (the rest stay for calls that run).
    parked: Arc<Semaphore>,
    max_parked: usize,
    _ticker: engine::EpochTicker,
}

#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

/// A plugin's line in `/health`.
#[derive(Debug, Serialize)]
pub struct PluginStatus {
    pub file: String,
    pub name: Option<String>,
    pub version: Option<String>,
    pub routes: Vec<String>,
    pub error: Option<String>,
}

impl Runtime {
    pub fn new(config: Arc<Config>, store: Store, metrics: Metrics) -> wasmtime::Result<Runtime> {
        let engine = engine::build_engine(&config.plugins)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let ticker = engine::EpochTicker::start(&engine);
        let max_parked = config
            .plugins
            .max_parked_calls
            .min(config.plugins.max_instances as usize / 2);
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                linker,
                registry: RwLock::new(Arc::new(Registry::default())),
                load_errors: RwLock::new(BTreeMap::new()),
                config: config.plugins.clone(),
                tools: config.tools.clone(),
                call_slots: Arc::new(Semaphore::new(config.plugins.max_concurrent_calls)),
                parked: Arc::new(Semaphore::new(max_parked)),
                max_parked,
                node_config: config,
                store,
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

    pub fn plugins_dir(&self) -> &Path {
        &self.inner.config.dir
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Every plugin file and how it stands, for `/health`.
    pub fn status(&self) -> Vec<PluginStatus> {
        let registry = self.registry();
        let errors = self.inner.load_errors.read();
        let mut statuses: BTreeMap<PathBuf, PluginStatus> = BTreeMap::new();
        for plugin in registry.plugins() {
            statuses.insert(
                plugin.file.clone(),
                PluginStatus {
                    file: plugin.file.display().to_string(),
                    name: Some(plugin.manifest.name.clone()),
                    version: Some(plugin.manifest.version.clone()),
                    routes: plugin.manifest.routes(),
                    error: None,
                },
            );
        }
        for (file, error) in errors.iter() {
            statuses
                .entry(file.clone())
                .or_insert_with(|| PluginStatus {
                    file: file.display().to_string(),
                    name: None,
                    version: None,
                    routes: Vec::new(),
                    error: None,
                })
                .error = Some(error.clone());
        }
        statuses.into_values().collect()
    }

    /// Load every `.wasm` file in the plugins folder (start-up).
    pub async fn load_all(&self) {
        let dir = self.inner.config.dir.clone();
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                // Not only regular files: anything else named .wasm is refused
                // by `load` with an error /health shows, rather than ignored.
                .filter(|p| has_plugin_extension(p))
                .collect(),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "cannot read the plugins folder");
                return;
            }
        };
        files.sort();
        for file in &files {
            self.reload(file).await;
        }
        self.end_vanished_installs();
    }

    /// Bring the plugin at `file` in line with the disk: load a new or changed
    /// file, withdraw a deleted one. Failures leave the previous version serving.
    pub async fn reload(&self, file: &Path) {
        // `symlink_metadata`: a dangling symlink is a file that is there (and
        // fails to load), not a removal that would end the install.
        if std::fs::symlink_metadata(file).is_err() {
            self.unload(file);
            return;
        }
        let started = Instant::now();
        match self.load(file).await {
            Ok(Some(plugin)) => {
                tracing::info!(
                    plugin = %plugin.manifest.name,
                    version = %plugin.manifest.version,
                    file = %file.display(),
                    routes = ?plugin.manifest.routes(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "plugin loaded"
                );
                self.inner
                    .metrics
                    .reloads
                    .get_or_create(&crate::metrics::OutcomeLabels::new("ok"))
                    .inc();
            }
            Ok(None) => {
                // The file is back to the version already serving: nothing is wrong any more.
                self.inner.load_errors.write().remove(file);
            }
            Err(error) => {
                tracing::error!(file = %file.display(), %error, "plugin not loaded; the previous version (if any) keeps serving");
                self.inner
                    .metrics
                    .reloads
                    .get_or_create(&crate::metrics::OutcomeLabels::new("error"))
                    .inc();
                self.inner
                    .load_errors
                    .write()
                    .insert(file.to_path_buf(), error.to_string());
            }
        }
    }

    fn unload(&self, file: &Path) {
        let removed = {
            let mut registry = self.inner.registry.write();
            let removed = registry.by_file(file).map(|plugin| plugin.manifest.name.clone());
            *registry = Arc::new(registry.without(file));
            removed
        };
        if let Some(name) = &removed {
            tracing::info!(plugin = %name, file = %file.display(), "plugin removed; its routes are withdrawn and its data deleted");
            self.end_install(name, file);
        }
        self.inner.load_errors.write().remove(file);
    }

    /// Record that the plugin `name` is installed at `file`; an install of the
    /// name at another file has ended (its file is gone, else the registry would
    /// have refused the name twice), so its key-value data goes.
    fn begin_install(&self, name: &str, file: &Path) {
        let store = &self.inner.store;
        let key = install_key(name);
        let here = file.to_string_lossy();
        match store.get::<String>(Collection::Meta, &key) {
            Ok(Some(recorded)) if recorded == here => return,
            Ok(Some(recorded)) => {
                tracing::info!(plugin = name, previous = %recorded, file = %file.display(), "a new install of this plugin name; the previous install's data is deleted");
                self.delete_kv(name);
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(plugin = name, %error, "cannot read the plugin's install record"),
        }
        if let Err(error) = store.put(Collection::Meta, &key, &here.as_ref(), None) {
            tracing::warn!(plugin = name, %error, "cannot record the plugin's install");
        }
    }

    /// The plugin `name` at `file` was removed: its install, and its data, end.
    fn end_install(&self, name: &str, file: &Path) {
        let store = &self.inner.store;
        let key = install_key(name);
        match store.get::<String>(Collection::Meta, &key) {
            Ok(Some(recorded)) if recorded == file.to_string_lossy() => {
                self.delete_kv(name);
                if let Err(error) = store.remove(Collection::Meta, &key) {
                    tracing::warn!(plugin = name, %error, "cannot remove the plugin's install record");
                }
            }
            _ => {}
        }
    }

    /// At start-up: installs whose file went away while the node was down end too.
    fn end_vanished_installs(&self) {
        let store = &self.inner.store;
        let keys = match store.keys(Collection::Meta, INSTALL_PREFIX.as_bytes(), usize::MAX) {
            Ok(keys) => keys,
            Err(error) => {
                tracing::warn!(%error, "cannot list plugin installs");
                return;
            }
        };
        for key in keys {
            let name = String::from_utf8_lossy(&key[INSTALL_PREFIX.len()..]).into_owned();
            if let Ok(Some(file)) = store.get::<String>(Collection::Meta, &key)
                && std::fs::symlink_metadata(&file).is_err()
            {
                tracing::info!(plugin = %name, file = %file, "plugin file gone since the last run; its data is deleted");
                self.end_install(&name, Path::new(&file));
            }
        }
    }

    fn delete_kv(&self, name: &str) {
        let store = &self.inner.store;
        let namespace = plugin_key(name, "");
        let result = store
            .keys(Collection::PluginKv, &namespace, usize::MAX)
            .and_then(|keys| {
                keys.iter()
                    .try_for_each(|key| store.remove(Collection::PluginKv, key).map(|_| ()))
            });
        if let Err(error) = result {
            tracing::warn!(plugin = name, %error, "cannot delete the plugin's key-value data");
        }
    }

    /// Compile, validate and swap in one plugin. `Ok(None)`: unchanged, nothing to do.
    async fn load(&self, file: &Path) -> Result<Option<Arc<LoadedPlugin>>, LoadError> {
        let limit = self.inner.config.max_file_mb << 20;
        let path = file.to_path_buf();
        let bytes = tokio::task::spawn_blocking(move || read_plugin_file(&path, limit))
            .await
            .map_err(|error| LoadError::Read {
                path: file.into(),
                source: std::io::Error::other(error.to_string()),
            })??;
        let content_hash = crate::crypto::sha256_hex(&bytes);
        if let Some(current) = self.registry().by_file(file)
            && current.content_hash == content_hash
        {
            return Ok(None);
        }
        let inner = self.inner.clone();
        let compile_error = |message: String| LoadError::Compile {
            path: file.into(),
            message,
        };
        let pre =
            tokio::task::spawn_blocking(move || -> wasmtime::Result<PluginPre<instance::PluginState>> {
                let component = engine::compile_cached(&inner.engine, &inner.config.cache_dir, &bytes)?;
                PluginPre::new(inner.linker.instantiate_pre(&component)?)
            })
            .await
            .map_err(|e| compile_error(e.to_string()))?
            .map_err(|e| compile_error(format!("{e:#}")))?;

        let raw = self
            .read_manifest(&pre)
            .await
            .map_err(|message| LoadError::Manifest {
                path: file.into(),
                message,
            })?;
        let manifest = PluginManifest::validate(raw).map_err(|message| LoadError::Manifest {
            path: file.into(),
            message,
        })?;
        let warm = match manifest.instance {
            manifest::InstancePolicy::Fresh => None,
            manifest::InstancePolicy::Warm {
                max_invocations,
                max_concurrency,
                idle_timeout_ms,
            } => Some(warm::WarmPool::new(warm::WarmLimits {
                max_invocations,
                max_concurrency,
                idle_timeout: Duration::from_millis(idle_timeout_ms.into()),
            })),
        };
        let plugin = Arc::new(LoadedPlugin {
            file: file.to_path_buf(),
            manifest,
            content_hash,
            loaded_at_ms: crate::store::now_ms(),
            pre,
            warm,
        });
        {
            let mut registry = self.inner.registry.write();
            let next = registry.with(plugin.clone()).map_err(LoadError::Conflict)?;
            *registry = Arc::new(next);
        }
        self.begin_install(&plugin.manifest.name, file);
        self.inner.load_errors.write().remove(file);
        let in_use = self
            .registry()
            .plugins()
            .map(|p| p.content_hash.clone())
            .collect();
        let (cache, bound) = (
            self.inner.config.cache_dir.clone(),
            self.inner.config.cache_max_mb << 20,
        );
        tokio::task::spawn_blocking(move || engine::evict_unused(&cache, &in_use, bound));
        Ok(Some(plugin))
    }

    async fn read_manifest(
        &self,
        pre: &PluginPre<instance::PluginState>,
    ) -> Result<bindings::Manifest, String> {
        // No key-value namespace: a manifest is read before the plugin is
        // known, and must not reach any plugin's data (nor share one).
        let mut store = instance::new_store(&self.inner, Arc::from("(loading)"), None, Exchange::new());
        let result = async {
            let plugin = pre.instantiate_async(&mut store).await?;
            plugin.call_manifest(&mut store).await
        }
        .await;
        instance::drain_stdio(&store);
        result.map_err(|error| instance::classify(&mut store, error).to_string())
    }

    /// Run one call on `plugin`: in a fresh instance, or a warm one if its manifest asks.
    pub async fn invoke(
        &self,
        plugin: &Arc<LoadedPlugin>,
        call: Call,
        exchange: Exchange,
    ) -> Result<String, InvokeError> {
        let started = Instant::now();
        let transport = call.transport;
        let result = self.invoke_inner(plugin, call, exchange).await;
        self.inner.metrics.observe_call(
            transport.as_str(),
            &plugin.manifest.name,
            &result,
            started.elapsed(),
        );
        result
    }

    async fn invoke_inner(
        &self,
        plugin: &Arc<LoadedPlugin>,
        call: Call,
        exchange: Exchange,
    ) -> Result<String, InvokeError> {
        let message = bindings::Message {
            transport: call.transport.into(),
            phase: match call.phase {
                Phase::Handle => bindings::Phase::Handle,
                Phase::Quote => bindings::Phase::Quote,
                Phase::Execute => bindings::Phase::Execute,
            },
            route: call.route,
            sender: call.sender,
            conversation: call.conversation,
            body: call.body,
        };
        let mut call_instance = self.call_instance(plugin, exchange).await?;
        let (store, instance) = call_instance.parts();
        let outcome = instance.call_handle(&mut *store, &message).await;
        instance::drain_stdio(store);
        let result = match outcome {
            Ok(Ok(reply)) => self.check_output(reply),
            Ok(Err(failure)) => Err(InvokeError::Failure {
                kind: failure.kind,
                message: failure.message,
            }),
            Err(error) => Err(instance::classify(store, error)),
        };
        // A typed failure is an answer; anything else may have left the instance broken.
        let clean = matches!(result, Ok(_) | Err(InvokeError::Failure { .. }));
        self.release(plugin, call_instance, clean);
        result
    }

    /// An instance for one call, and the node-wide call slot it runs under. A
    /// warm plugin waits for a place in its own pool before taking a node-wide
    /// slot, so a busy warm plugin does not hold slots other plugins need.
    async fn call_instance(
        &self,
        plugin: &Arc<LoadedPlugin>,
        exchange: Exchange,
    ) -> Result<CallInstance, InvokeError> {
        let name = plugin.manifest.name.as_str();
        let call_instance = if let Some(pool) = &plugin.warm {
            let queue_timeout = Duration::from_millis(self.inner.config.queue_timeout_ms);
            let place = pool.reserve(queue_timeout).await?;
            let slot = self.call_slot().await?;
            let lease = pool
                .check_out(place, &self.inner, &plugin.pre, name, exchange)
                .await?;
            let mut call_instance = CallInstance::Warm(lease);
            // The slot lives in the store: a parked call gives it up and takes one again there.
            call_instance.parts().0.data_mut().slot.permit = Some(slot);
            call_instance
        } else {
            let slot = self.call_slot().await?;
            let mut store =
                instance::new_store(&self.inner, Arc::from(name), Some(Arc::from(name)), exchange);
            store.data_mut().slot.permit = Some(slot);
            match plugin.pre.instantiate_async(&mut store).await {
                Ok(instance) => CallInstance::Fresh(store, instance),
                Err(error) => return Err(instance::classify(&mut store, error)),
            }
        };
        Ok(call_instance)
    }

    /// After a call: a warm instance whose call ended cleanly goes back to its
    /// pool; everything else is dropped, returning its pooled slot.
    fn release(&self, plugin: &LoadedPlugin, call_instance: CallInstance, clean: bool) {
        if let (CallInstance::Warm(lease), Some(pool), true) = (call_instance, &plugin.warm, clean) {
            pool.check_in(lease);
        }
    }

    fn check_output(&self, reply: String) -> Result<String, InvokeError> {
        let limit = self.inner.config.max_output_bytes;
        if reply.len() > limit {
            return Err(InvokeError::OutputTooLarge {
                size: reply.len(),
                limit,
            });
        }
        Ok(reply)
    }

    async fn call_slot(&self) -> Result<OwnedSemaphorePermit, InvokeError> {
        let wait = Duration::from_millis(self.inner.config.queue_timeout_ms);
        match tokio::time::timeout(wait, self.inner.call_slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(InvokeError::Overloaded),
        }
    }

    /// A place to park a call in, if one of `plugins.max_parked_calls` is free.
    pub(crate) fn park_place(&self) -> Option<OwnedSemaphorePermit> {
        self.inner.parked.clone().try_acquire_owned().ok()
    }

    /// Await `wait` (a host wait on something external) parked in `place`:
    /// without the caller's call slot, which is taken again afterwards. With no
    /// place, the caller waits holding its slot, as before parking existed. A
    /// call that finds no slot again within `queue_timeout_ms` is marked lost
    /// and ends as overloaded (see [`instance::CallSlot`]).
    pub(crate) async fn while_parked<F: Future>(
        &self,
        slot: &mut instance::CallSlot,
        place: Option<OwnedSemaphorePermit>,
        wait: F,
    ) -> F::Output {
        let Some(place) = place else {
            return wait.await;
        };
        let held = slot.permit.take().is_some();
        let output = wait.await;
        if held {
            match self.call_slot().await {
                Ok(permit) => slot.permit = Some(permit),
                Err(_) => slot.lost = true,
            }
        }
        drop(place);
        output
    }

    /// Run a tool for a plugin call: lifecycle events, approval by risk, then
    /// the tool plugin's `run-tool` (in a fresh instance, or a warm one if its
    /// manifest asks) in an exchange of its own ([`Exchange::nested`]).
    ///
    /// The caller is parked meanwhile (its `slot` given up) when a parking place
    /// is free; a tool that needs an approval and finds none fails at once.
    pub(crate) async fn run_tool(
        &self,
        name: &str,
        arguments: serde_json::Value,
        caller: &Exchange,
        slot: &mut instance::CallSlot,
    ) -> Result<String, ToolError> {
        if caller.tool_depth >= self.inner.config.max_tool_depth {
            return Err(ToolError::TooDeep(self.inner.config.max_tool_depth));
        }
        let registry = self.registry();
        let Some(plugin) = registry.tool(name).cloned() else {
            return Err(ToolError::Unknown(name.to_string()));
        };
        let Some(spec) = plugin.manifest.tools.iter().find(|t| t.name == name).cloned() else {
            return Err(ToolError::Unknown(name.to_string()));
        };
        let lifecycle = Lifecycle {
            call_id: uuid::Uuid::new_v4().to_string(),
            name,
            risk: spec.risk,
            exchange: caller,
        };
        let threshold = Risk::parse(&self.inner.tools.approval_threshold).unwrap_or(Risk::High);
        let approver = if spec.risk >= threshold {
            let Some(approver) = caller.approver.clone() else {
                lifecycle.failed("no approver").await;
                return Err(ToolError::NoApprover(name.to_string()));
            };
            Some(approver)
        } else {
            None
        };
        let place = self.park_place();
        if approver.is_some() && place.is_none() {
            lifecycle.failed("too many calls wait for an approval").await;
            return Err(ToolError::TooManyWaiting {
                tool: name.to_string(),
                limit: self.inner.max_parked,
            });
        }
        let work = async {
            if let Some(approver) = approver {
                let request = ApprovalRequest {
                    call_id: lifecycle.call_id.clone(),
                    tool_name: name.to_string(),
                    arguments: arguments.clone(),
                    risk: spec.risk,
                    description: spec.description.clone(),
                };
                let timeout = Duration::from_millis(self.inner.tools.approval_timeout_ms);
                let outcome = tokio::time::timeout(timeout, approver.approve(request))
                    .await
                    .unwrap_or(ApprovalOutcome::TimedOut);
                match outcome {
                    ApprovalOutcome::Approved => {}
                    ApprovalOutcome::Rejected { feedback } => {
                        lifecycle.failed("rejected").await;
                        return Err(ToolError::Rejected {
                            tool: name.to_string(),
                            feedback,
                        });
                    }
                    ApprovalOutcome::TimedOut => {
                        lifecycle.failed("approval timed out").await;
                        return Err(ToolError::ApprovalTimedOut(name.to_string()));
                    }
                }
            }
            lifecycle
                .send("started", serde_json::json!({"arguments": arguments}))
                .await;
            let result = self
                .run_tool_instance(&plugin, name, &arguments, caller.nested())
                .await;
            match &result {
                Ok(output) => {
                    let parsed: serde_json::Value = serde_json::from_str(output)
                        .unwrap_or_else(|_| serde_json::Value::String(output.clone()));
                    lifecycle
                        .send("completed", serde_json::json!({"result": parsed}))
                        .await;
                }
                Err(error) => lifecycle.failed(&error.to_string()).await,
            }
            result
        };
        self.while_parked(slot, place, work).await
    }

    async fn run_tool_instance(
        &self,
        plugin: &Arc<LoadedPlugin>,
        name: &str,
        arguments: &serde_json::Value,
        exchange: Exchange,
    ) -> Result<String, ToolError> {
        let started = Instant::now();
        let outcome = self.run_tool_call(plugin, name, arguments, exchange).await;
        let label = match &outcome {
            Ok(Ok(_)) => "ok",
            // The tool answered with an error of its own: a failure, not a fault.
            Ok(Err(_)) => "failure",
            Err(error) => error.outcome(),
        };
        let elapsed = started.elapsed();
        self.inner
            .metrics
            .observe_outcome("tool", &plugin.manifest.name, label, elapsed);
        let failed = |message: String| ToolError::Failed {
            tool: name.to_string(),
            message,
        };
        match outcome {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(message)) => Err(failed(message)),
            Err(error) => Err(failed(error.to_string())),
        }
    }

    /// One `run-tool` call: the tool's own answer (`Ok(Err)` is an error it reported),
    /// or how the instance failed.
    async fn run_tool_call(
        &self,
        plugin: &Arc<LoadedPlugin>,
        name: &str,
        arguments: &serde_json::Value,
        exchange: Exchange,
    ) -> Result<Result<String, String>, InvokeError> {
        let mut call_instance = self.call_instance(plugin, exchange).await?;
        let (store, instance) = call_instance.parts();
        let outcome = instance
            .call_run_tool(&mut *store, name, &arguments.to_string())
            .await;
        instance::drain_stdio(store);
        let (result, clean) = match outcome {
            Ok(Ok(output)) => match self.check_output(output) {
                Ok(output) => (Ok(Ok(output)), true),
                Err(error) => (Err(error), false),
            },
            Ok(Err(message)) => (Ok(Err(message)), true),
            Err(error) => (Err(instance::classify(store, error)), false),
        };
        self.release(plugin, call_instance, clean);
        result
    }
}

/// The host's lifecycle events of one tool call, sent to the caller's exchange.
struct Lifecycle<'a> {
    call_id: String,
    name: &'a str,
    risk: Risk,
    exchange: &'a Exchange,
}

impl Lifecycle<'_> {
    async fn send(&self, status: &str, extra: serde_json::Value) {
        let mut data = serde_json::json!({
            "call_id": self.call_id, "tool_name": self.name, "status": status, "risk": self.risk,
        });
        if let (Some(data), serde_json::Value::Object(extra)) = (data.as_object_mut(), extra) {
            data.extend(extra);
        }
        let event = PluginEvent {
            kind: "tool_call".into(),
            data,
        };
        // A consumer that has gone or stalls does not change the tool's outcome.
        let _ = self.exchange.send_lifecycle(event).await;
    }

    async fn failed(&self, error: &str) {
        self.send("failed", serde_json::json!({"error": error})).await;
    }
}

/// Key of the install record of plugin `name` in [`Collection::Meta`]: its file.
const INSTALL_PREFIX: &str = "plugin-install:";

fn install_key(name: &str) -> Vec<u8> {
    format!("{INSTALL_PREFIX}{name}").into_bytes()
}

fn has_plugin_extension(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
}

/// Read a plugin file: a regular file only (a symlink to one is followed), at
/// most `limit` bytes. The open does not block (a FIFO would, until a writer
/// came), and the type is checked on the opened file, so a swap between check
/// and read cannot slip a device or FIFO through.
fn read_plugin_file(path: &Path, limit: u64) -> Result<Vec<u8>, LoadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read_error = |source| LoadError::Read {
        path: path.into(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        return Err(LoadError::NotAFile { path: path.into() });
    }
    if metadata.len() > limit {
        return Err(LoadError::TooLarge {
            path: path.into(),
            size: metadata.len(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // One byte past the limit tells a file that grew since the check.
    file.take(limit + 1).read_to_end(&mut bytes).map_err(read_error)?;
    if bytes.len() as u64 > limit {
        return Err(LoadError::TooLarge {
            path: path.into(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}
