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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use serde::Serialize;
use tokio::sync::Semaphore;
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

pub use bindings::FailureKind;
use bindings::{Plugin, PluginPre};
pub use exchange::{ApprovalOutcome, ApprovalRequest, Approver, Exchange, PluginEvent};
pub use manifest::PluginManifest;
pub use registry::Registry;

use crate::config::{Config, PluginsConfig, ToolsConfig};
use crate::metrics::Metrics;
use crate::store::Store;

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
    #[error("tool {tool} failed: {message}")]
    Failed { tool: String, message: String },
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is {size} bytes, over the {limit}-byte limit")]
    TooLarge { path: PathBuf, size: u64, limit: u64 },
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
    call_slots: Semaphore,
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
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                linker,
                registry: RwLock::new(Arc::new(Registry::default())),
                load_errors: RwLock::new(BTreeMap::new()),
                config: config.plugins.clone(),
                tools: config.tools.clone(),
                call_slots: Semaphore::new(config.plugins.max_concurrent_calls),
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
                .filter(|p| is_plugin_file(p))
                .collect(),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "cannot read the plugins folder");
                return;
            }
        };
        files.sort();
        for file in files {
            self.reload(&file).await;
        }
    }

    /// Bring the plugin at `file` in line with the disk: load a new or changed
    /// file, withdraw a deleted one. Failures leave the previous version serving.
    pub async fn reload(&self, file: &Path) {
        if !file.exists() {
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
        let mut registry = self.inner.registry.write();
        if let Some(plugin) = registry.by_file(file) {
            tracing::info!(plugin = %plugin.manifest.name, file = %file.display(), "plugin removed; its routes are withdrawn");
        }
        *registry = Arc::new(registry.without(file));
        self.inner.load_errors.write().remove(file);
    }

    /// Compile, validate and swap in one plugin. `Ok(None)`: unchanged, nothing to do.
    async fn load(&self, file: &Path) -> Result<Option<Arc<LoadedPlugin>>, LoadError> {
        let limit = self.inner.config.max_file_mb << 20;
        let metadata = std::fs::metadata(file).map_err(|source| LoadError::Read {
            path: file.into(),
            source,
        })?;
        if metadata.len() > limit {
            return Err(LoadError::TooLarge {
                path: file.into(),
                size: metadata.len(),
                limit,
            });
        }
        let bytes = tokio::fs::read(file).await.map_err(|source| LoadError::Read {
            path: file.into(),
            source,
        })?;
        let content_hash = crate::crypto::sha256_hex(&bytes);
        if let Some(current) = self.registry().by_file(file) {
            if current.content_hash == content_hash {
                return Ok(None);
            }
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
        self.inner.load_errors.write().remove(file);
        Ok(Some(plugin))
    }

    async fn read_manifest(
        &self,
        pre: &PluginPre<instance::PluginState>,
    ) -> Result<bindings::Manifest, String> {
        let mut store = instance::new_store(&self.inner, Arc::from("(loading)"), Exchange::new());
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
        let (mut call_instance, _slot) = self.call_instance(plugin, exchange).await?;
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
    ) -> Result<(CallInstance, tokio::sync::SemaphorePermit<'_>), InvokeError> {
        let name = plugin.manifest.name.as_str();
        if let Some(pool) = &plugin.warm {
            let queue_timeout = Duration::from_millis(self.inner.config.queue_timeout_ms);
            let place = pool.reserve(queue_timeout).await?;
            let slot = self.call_slot().await?;
            let lease = pool
                .check_out(place, &self.inner, &plugin.pre, name, exchange)
                .await?;
            return Ok((CallInstance::Warm(lease), slot));
        }
        let slot = self.call_slot().await?;
        let mut store = instance::new_store(&self.inner, Arc::from(name), exchange);
        match plugin.pre.instantiate_async(&mut store).await {
            Ok(instance) => Ok((CallInstance::Fresh(store, instance), slot)),
            Err(error) => Err(instance::classify(&mut store, error)),
        }
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

    async fn call_slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, InvokeError> {
        let wait = Duration::from_millis(self.inner.config.queue_timeout_ms);
        match tokio::time::timeout(wait, self.inner.call_slots.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(InvokeError::Overloaded),
        }
    }

    /// Run a tool through the host: lifecycle events, approval by risk, then the
    /// tool plugin's `run-tool` (in a fresh instance, or a warm one if its manifest asks).
    pub async fn run_tool(
        &self,
        name: &str,
        arguments: serde_json::Value,
        exchange: &Exchange,
    ) -> Result<String, ToolError> {
        if exchange.tool_depth > self.inner.config.max_tool_depth {
            return Err(ToolError::TooDeep(self.inner.config.max_tool_depth));
        }
        let registry = self.registry();
        let Some(plugin) = registry.tool(name).cloned() else {
            return Err(ToolError::Unknown(name.to_string()));
        };
        let Some(spec) = plugin.manifest.tools.iter().find(|t| t.name == name).cloned() else {
            return Err(ToolError::Unknown(name.to_string()));
        };
        let call_id = uuid::Uuid::new_v4().to_string();
        let lifecycle = |status: &str, extra: serde_json::Value| {
            let mut data = serde_json::json!({
                "call_id": call_id, "tool_name": name, "status": status, "risk": spec.risk,
            });
            if let (Some(data), Some(extra)) = (data.as_object_mut(), extra.as_object()) {
                data.extend(extra.clone());
            }
            PluginEvent {
                kind: "tool_call".into(),
                data,
            }
        };
        let threshold = Risk::parse(&self.inner.tools.approval_threshold).unwrap_or(Risk::High);
        if spec.risk >= threshold {
            let Some(approver) = exchange.approver.clone() else {
                let _ = exchange
                    .send(lifecycle("failed", serde_json::json!({"error": "no approver"})))
                    .await;
                return Err(ToolError::NoApprover(name.to_string()));
            };
            let request = ApprovalRequest {
                call_id: call_id.clone(),
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
                    let _ = exchange
                        .send(lifecycle("failed", serde_json::json!({"error": "rejected"})))
                        .await;
                    return Err(ToolError::Rejected {
                        tool: name.to_string(),
                        feedback,
                    });
                }
                ApprovalOutcome::TimedOut => {
                    let _ = exchange
                        .send(lifecycle(
                            "failed",
                            serde_json::json!({"error": "approval timed out"}),
                        ))
                        .await;
                    return Err(ToolError::ApprovalTimedOut(name.to_string()));
                }
            }
        }
        let _ = exchange
            .send(lifecycle("started", serde_json::json!({"arguments": arguments})))
            .await;
        let result = self
            .run_tool_instance(&plugin, name, &arguments, exchange.clone())
            .await;
        match &result {
            Ok(output) => {
                let parsed: serde_json::Value = serde_json::from_str(output)
                    .unwrap_or_else(|_| serde_json::Value::String(output.clone()));
                let _ = exchange
                    .send(lifecycle("completed", serde_json::json!({"result": parsed})))
                    .await;
            }
            Err(error) => {
                let _ = exchange
                    .send(lifecycle(
                        "failed",
                        serde_json::json!({"error": error.to_string()}),
                    ))
                    .await;
            }
        }
        result
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
        let (mut call_instance, _slot) = self.call_instance(plugin, exchange).await?;
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

pub fn is_plugin_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm") && path.is_file()
}
