//! Loading plugins: the plugins folder at start-up, one file on reload, and
//! the install records that decide when a plugin's key-value data goes.
//!
//! Plugin files are read only when they are regular files (a symlink to one is
//! followed), through a non-blocking open and a bounded read: a FIFO or a
//! symlink to a device in the plugins folder is refused with an error in
//! `/health`, never read. A plugin's key-value data belongs to its install —
//! its name at its file: removing the file (while the node runs, or before it
//! starts) deletes the data, so another plugin taking the name later starts
//! empty; replacing the file (a new version) keeps it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bindings::agent::exports::agora::node::extensions::GuestIndices as AgentIndices;
use super::bindings::{self, PluginIndices, PluginPre};
use super::capabilities::Capabilities;
use super::exchange::Exchange;
use super::manifest::{self, PluginManifest};
use super::{LoadError, LoadedPlugin, Runtime, engine, instance, warm};
use crate::config::DEFAULT_PROVIDER;
use crate::metrics::OutcomeLabels;
use crate::store::{Collection, plugin_key};

impl Runtime {
    /// Load every `.wasm` file in the plugins folder (start-up). The folder is
    /// listed, and [`Runtime::is_starting`] holds, before this returns; the
    /// returned future compiles, so a node can serve `/health` meanwhile.
    pub fn load_all(&self) -> impl Future<Output = ()> + Send + 'static {
        let files = self.list_plugin_files();
        {
            let mut progress = self.inner.progress.write();
            progress.starting = true;
            progress.pending = files.iter().cloned().collect();
        }
        let runtime = self.clone();
        async move {
            let started = Instant::now();
            for file in &files {
                runtime.reload(file).await;
                runtime.inner.progress.write().pending.remove(file);
            }
            runtime.end_vanished_installs().await;
            runtime.inner.progress.write().starting = false;
            let statuses = runtime.status();
            let count = |state| statuses.iter().filter(|s| s.state == state).count();
            tracing::info!(
                found = files.len(),
                loaded = count(super::LoadState::Loaded),
                failed = count(super::LoadState::Failed),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "start-up plugin load done"
            );
        }
    }

    fn list_plugin_files(&self) -> Vec<PathBuf> {
        let dir = &self.inner.host.config.dir;
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                // Not only regular files: anything else named .wasm is refused
                // by `load` with an error /health shows, rather than ignored.
                .filter(|p| has_plugin_extension(p))
                .collect(),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "cannot read the plugins folder");
                Vec::new()
            }
        };
        files.sort();
        files
    }

    /// Bring the plugin at `file` in line with the disk: load a new or changed
    /// file, withdraw a deleted one. Failures leave the previous version serving.
    ///
    /// One reload runs at a time: the watcher and the console's upload may
    /// both ask for the same new file, and the second then finds it serving
    /// (or failed, with the same content) instead of compiling it again.
    pub async fn reload(&self, file: &Path) {
        let _one_at_a_time = self.inner.reloading.lock().await;
        // `symlink_metadata`: a dangling symlink is a file that is there (and
        // fails to load), not a removal that would end the install.
        if std::fs::symlink_metadata(file).is_err() {
            self.unload(file).await;
            return;
        }
        let started = Instant::now();
        // Shown as `compiling` from the read to the swap, manifest included.
        {
            let mut progress = self.inner.progress.write();
            progress.pending.remove(file);
            progress.compiling.insert(file.to_path_buf());
        }
        let loaded = self.load(file).await;
        match loaded {
            Ok(Loaded::New(plugin)) => {
                tracing::info!(
                    plugin = %plugin.manifest.name,
                    version = %plugin.manifest.version,
                    file = %file.display(),
                    routes = ?super::registry::claims(&plugin),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "plugin loaded"
                );
                self.inner
                    .metrics
                    .reloads
                    .get_or_create(&OutcomeLabels::new("ok"))
                    .inc();
            }
            Ok(Loaded::Serving) => {
                // The file is back to the version already serving: nothing is wrong any more.
                self.inner.load_errors.write().remove(file);
            }
            // Said and counted when those bytes failed; they fail the same way again.
            Ok(Loaded::FailedBefore) => {}
            Err(Failed { content_hash, error }) => {
                tracing::error!(file = %file.display(), %error, "plugin not loaded; the previous version (if any) keeps serving");
                self.inner
                    .metrics
                    .reloads
                    .get_or_create(&OutcomeLabels::new("error"))
                    .inc();
                self.inner.load_errors.write().insert(
                    file.to_path_buf(),
                    super::FailedLoad {
                        content_hash,
                        error: error.to_string(),
                    },
                );
            }
        }
        // Only now: the file is never missing from the status in between.
        self.inner.progress.write().compiling.remove(file);
    }

    async fn unload(&self, file: &Path) {
        let removed = {
            let mut registry = self.inner.registry.write();
            let removed = registry.by_file(file).map(|plugin| plugin.manifest.name.clone());
            *registry = Arc::new(registry.without(file));
            removed
        };
        if removed.is_some() {
            self.registry_changed();
        }
        if let Some(name) = &removed {
            tracing::info!(plugin = %name, file = %file.display(), "plugin removed; its routes are withdrawn and its data deleted");
            self.end_install(name, file).await;
        }
        self.inner.load_errors.write().remove(file);
    }

    /// Record that the plugin `name` is installed at `file`; an install of the
    /// name at another file has ended (its file is gone, else the registry would
    /// have refused the name twice), so its key-value data goes.
    ///
    /// On a store shared by a fleet the key-value data is the fleet's, and each
    /// node has a plugins folder of its own: one node's install or removal says
    /// nothing about the others', so no node deletes it (an operator does).
    async fn begin_install(&self, name: &str, file: &Path) {
        let store = &self.inner.host.store;
        if store.is_shared() {
            return;
        }
        let key = install_key(name);
        let here = file.to_string_lossy();
        match store.get::<String>(Collection::Meta, &key).await {
            Ok(Some(recorded)) if recorded == here => return,
            Ok(Some(recorded)) => {
                tracing::info!(plugin = name, previous = %recorded, file = %file.display(), "a new install of this plugin name; the previous install's data is deleted");
                self.delete_kv(name).await;
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(plugin = name, %error, "cannot read the plugin's install record"),
        }
        if let Err(error) = store.put(Collection::Meta, &key, &here.as_ref(), None).await {
            tracing::warn!(plugin = name, %error, "cannot record the plugin's install");
        }
    }

    /// The plugin `name` at `file` was removed: its install, and its data, end.
    async fn end_install(&self, name: &str, file: &Path) {
        let store = &self.inner.host.store;
        if store.is_shared() {
            return;
        }
        let key = install_key(name);
        match store.get::<String>(Collection::Meta, &key).await {
            Ok(Some(recorded)) if recorded == file.to_string_lossy() => {
                self.delete_kv(name).await;
                if let Err(error) = store.remove(Collection::Meta, &key).await {
                    tracing::warn!(plugin = name, %error, "cannot remove the plugin's install record");
                }
            }
            _ => {}
        }
    }

    /// At start-up: installs whose file went away while the node was down end too.
    async fn end_vanished_installs(&self) {
        let store = &self.inner.host.store;
        if store.is_shared() {
            return;
        }
        let keys = match store
            .keys(Collection::Meta, INSTALL_PREFIX.as_bytes(), usize::MAX)
            .await
        {
            Ok(keys) => keys,
            Err(error) => {
                tracing::warn!(%error, "cannot list plugin installs");
                return;
            }
        };
        for key in keys {
            let name = String::from_utf8_lossy(&key[INSTALL_PREFIX.len()..]).into_owned();
            if let Ok(Some(file)) = store.get::<String>(Collection::Meta, &key).await
                && std::fs::symlink_metadata(&file).is_err()
            {
                tracing::info!(plugin = %name, file = %file, "plugin file gone since the last run; its data is deleted");
                Box::pin(self.end_install(&name, Path::new(&file))).await;
            }
        }
    }

    async fn delete_kv(&self, name: &str) {
        let store = &self.inner.host.store;
        let namespace = plugin_key(name, "");
        let result = async {
            for key in store.keys(Collection::PluginKv, &namespace, usize::MAX).await? {
                store.remove(Collection::PluginKv, &key).await?;
            }
            Ok::<(), crate::store::StoreError>(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(plugin = name, %error, "cannot delete the plugin's key-value data");
        }
    }

    /// Compile, validate and swap in one plugin, unless these bytes are serving
    /// already or failed already.
    async fn load(&self, file: &Path) -> Result<Loaded, Failed> {
        let limit = self.inner.host.config.max_file_mb << 20;
        let path = file.to_path_buf();
        let bytes = tokio::task::spawn_blocking(move || read_plugin_file(&path, limit))
            .await
            .map_err(|error| LoadError::Read {
                path: file.into(),
                source: std::io::Error::other(error.to_string()),
            })
            .and_then(|read| read)
            .map_err(|error| Failed {
                content_hash: None,
                error,
            })?;
        let content_hash = crate::crypto::sha256_hex(&bytes);
        if let Some(current) = self.registry().by_file(file)
            && current.content_hash == content_hash
        {
            return Ok(Loaded::Serving);
        }
        let failed_before = self
            .inner
            .load_errors
            .read()
            .get(file)
            .is_some_and(|failed| failed.content_hash.as_deref() == Some(content_hash.as_str()));
        if failed_before {
            return Ok(Loaded::FailedBefore);
        }
        let size = bytes.len() as u64;
        self.swap_in(file, bytes, content_hash.clone(), size)
            .await
            .map(Loaded::New)
            .map_err(|error| Failed {
                // Only what the bytes alone decide: a name taken by another file may be free
                // later, and a manifest is read by running the plugin, which may time out.
                content_hash: matches!(error, LoadError::Compile { .. }).then_some(content_hash),
                error,
            })
    }

    /// Compile and validate `bytes`, the content of `file`, and put the plugin in the registry.
    async fn swap_in(
        &self,
        file: &Path,
        bytes: Vec<u8>,
        content_hash: String,
        size: u64,
    ) -> Result<Arc<LoadedPlugin>, LoadError> {
        let language = toolchain_language(&bytes);
        let compiling = Instant::now();
        let pre = self.compile(file, bytes).await?;
        let compile_ms = compiling.elapsed().as_millis() as u64;
        // Absent for plugins built for the world `plugin` alone: they have no capabilities.
        let agent = AgentIndices::new(pre.instance_pre()).ok();
        let manifest_error = |message| LoadError::Manifest {
            path: file.into(),
            message,
        };
        let exports = bindings::CallExports::new(pre.instance_pre())
            .map_err(|error| manifest_error(error.to_string()))?;
        let (raw, capabilities) = self
            .read_manifest(&pre, agent.as_ref())
            .await
            .map_err(manifest_error)?;
        let manifest = PluginManifest::validate(raw).map_err(manifest_error)?;
        let capabilities = match capabilities {
            Some(text) => Capabilities::parse(&text).map_err(manifest_error)?,
            None => Capabilities::default(),
        };
        check_declarations(&manifest, &capabilities, &exports).map_err(manifest_error)?;
        for provider in &capabilities.llm {
            let name = (provider != DEFAULT_PROVIDER).then_some(provider.as_str());
            if self.inner.host.node_config.llm.provider(name).is_none() {
                tracing::warn!(plugin = %manifest.name, provider, "the plugin declares a model provider the node does not configure; its chats will be refused");
            }
        }
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
            size,
            compile_ms,
            language,
            capabilities,
            pre,
            exports,
            agent,
            warm,
        });
        {
            let mut registry = self.inner.registry.write();
            let next = registry.with(plugin.clone()).map_err(LoadError::Conflict)?;
            *registry = Arc::new(next);
        }
        self.registry_changed();
        self.begin_install(&plugin.manifest.name, file).await;
        self.inner.load_errors.write().remove(file);
        let in_use = self
            .registry()
            .plugins()
            .map(|p| p.content_hash.clone())
            .collect();
        let (cache, bound) = (
            self.inner.host.config.cache_dir.clone(),
            self.inner.host.config.cache_max_mb << 20,
        );
        tokio::task::spawn_blocking(move || engine::evict_unused(&cache, &in_use, bound));
        Ok(plugin)
    }

    /// Compile (or load from the cache) and pre-link, with a log line at each end.
    async fn compile(
        &self,
        file: &Path,
        bytes: Vec<u8>,
    ) -> Result<PluginPre<instance::PluginState>, LoadError> {
        tracing::info!(file = %file.display(), bytes = bytes.len(), "compiling plugin");
        let started = Instant::now();
        let inner = self.inner.clone();
        let compiled = tokio::task::spawn_blocking(move || -> wasmtime::Result<_> {
            let (component, cache_hit) =
                engine::compile_cached(&inner.engine, &inner.host.config.cache_dir, &bytes)?;
            Ok((
                PluginPre::new(inner.linker.instantiate_pre(&component)?)?,
                cache_hit,
            ))
        })
        .await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let compile_error = |message: String| LoadError::Compile {
            path: file.into(),
            message,
        };
        match compiled {
            Ok(Ok((pre, cache_hit))) => {
                tracing::info!(file = %file.display(), elapsed_ms, cache = if cache_hit { "hit" } else { "miss" }, "plugin compiled");
                Ok(pre)
            }
            Ok(Err(error)) => {
                tracing::info!(file = %file.display(), elapsed_ms, "plugin did not compile");
                Err(compile_error(format!("{error:#}")))
            }
            Err(error) => Err(compile_error(error.to_string())),
        }
    }

    /// The plugin's manifest, and its capabilities' JSON text when it has the `extensions` export.
    async fn read_manifest(
        &self,
        pre: &PluginPre<instance::PluginState>,
        agent: Option<&AgentIndices>,
    ) -> Result<(bindings::Manifest, Option<String>), String> {
        // No key-value namespace: a manifest is read before the plugin is
        // known, and must not reach any plugin's data (nor share one).
        let mut store = instance::new_store(&self.inner, Arc::from(LOADING), None, Exchange::new());
        let result = async {
            let instance = pre.instance_pre().instantiate_async(&mut store).await?;
            let plugin = PluginIndices::new(pre.instance_pre())?.load(&mut store, &instance)?;
            let manifest = plugin.call_manifest(&mut store).await?;
            // Named now, so its capabilities may follow its settings (a feed's host, say);
            // still without a key-value namespace.
            store.data_mut().plugin_name = Arc::from(manifest.name.as_str());
            let capabilities = match agent {
                Some(agent) => {
                    let agent = agent.load(&mut store, &instance)?;
                    Some(agent.call_capabilities(&mut store).await?)
                }
                None => None,
            };
            Ok((manifest, capabilities))
        }
        .await;
        instance::drain_stdio(&store);
        result.map_err(|error| instance::classify(&mut store, error).to_string())
    }
}

/// What the capabilities declare of the manifest's documents and the
/// component's exports holds: a declared prompt can be rendered, a media type
/// names a document the plugin serves.
fn check_declarations(
    manifest: &PluginManifest,
    capabilities: &Capabilities,
    exports: &bindings::CallExports,
) -> Result<(), String> {
    if !capabilities.prompts.is_empty() && !exports.renders_prompts() {
        return Err(
            "capabilities declare prompts but the component does not export agora:node/prompts".into(),
        );
    }
    for key in capabilities.documents.keys() {
        let served = key == super::capabilities::DEFAULT_DOCUMENT
            || manifest.protocols.iter().any(|document| &document.hash == key);
        if !served {
            return Err(format!(
                "capabilities declare the media type of document {key}, which the manifest does not serve"
            ));
        }
    }
    Ok(())
}

/// The name a plugin goes by until its manifest has named it.
pub(super) const LOADING: &str = "(loading)";

/// Key of the install record of plugin `name` in [`Collection::Meta`]: its file.
const INSTALL_PREFIX: &str = "plugin-install:";

fn install_key(name: &str) -> Vec<u8> {
    format!("{INSTALL_PREFIX}{name}").into_bytes()
}

pub(super) fn has_plugin_extension(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
}

/// Read a plugin file: a regular file only (a symlink to one is followed), at
/// most `limit` bytes. The open does not block (a FIFO would, until a writer
/// came), and the type is checked on the opened file, so a swap between check
/// and read cannot slip a device or FIFO through.
pub(super) fn read_plugin_file(path: &Path, limit: u64) -> Result<Vec<u8>, LoadError> {
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

/// What a load found.
enum Loaded {
    New(Arc<LoadedPlugin>),
    /// The file holds the version serving already.
    Serving,
    /// The file holds the bytes that failed to load last time.
    FailedBefore,
}

/// A load that failed, with the content it failed on when those bytes will always fail.
struct Failed {
    content_hash: Option<String>,
    error: LoadError,
}

/// The language a component was written in, by the marks its toolchain leaves
/// in it: componentize-py and ComponentizeJS name themselves in the component
/// (both embed runtimes built from Rust and C, so the producers section alone
/// would say "Rust"); else rustc's or wit-bindgen-rust's line in the producers section.
fn toolchain_language(bytes: &[u8]) -> Option<&'static str> {
    let has = |mark: &[u8]| bytes.windows(mark.len()).any(|window| window == mark);
    if has(b"componentize-py") {
        Some("python")
    } else if has(b"ComponentizeJS") {
        Some("javascript")
    } else if has(b"\x05rustc") || has(b"wit-bindgen-rust") {
        Some("rust")
    } else {
        None
    }
}
