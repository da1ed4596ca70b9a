//! Plugins for a fleet: one plugin set in the shared database, mirrored into
//! every node's plugins folder, so hot reload reaches every node.
//!
//! The set ([`crate::store::plugin_set`]) holds each file by content. A node
//! mirrors it into its own folder and loads from there, so the folder is what
//! the node serves, reload keeps its keep-the-old-version-on-error rule per
//! node, and an operator looking in any node's folder sees the fleet's files.
//!
//! **What wins.** While a node runs, its folder is a way to publish: a file
//! dropped in, replaced or removed (by hand, by `agora-node dev`, by the
//! console) goes to the set once this node has loaded it — a file that does not
//! load here is not published, so a broken build stays on the machine that
//! made it. Every other node hears of the change on the fleet bus (topic
//! [`TOPIC`]) and, as a safety net, reads the set every [`RESYNC`]. At start-up
//! the set wins: the folder is brought in line before anything loads, and a
//! file the set does not have is moved aside as `NAME.wasm.unpublished` (a node
//! that was down does not bring back a plugin the fleet removed meanwhile). The
//! first node to start on a database with no set seeds it from its folder.
//! `plugins.fleet = false` opts a node out: it serves its own folder only.
//!
//! **Loops.** The node remembers the content it last agreed with the set on,
//! per file (`agreed`). A change of the folder that matches it is the node's
//! own mirroring coming back through the watcher, not news; a fleet change
//! arriving for content the node agreed on already is skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::{Runtime, loader};
use crate::store::plugin_set::PublishedPlugin;
use crate::store::{Store, StoreError};

/// The fleet bus topic of a change of the set.
pub const TOPIC: &str = "plugins";

/// How often a node reads the set without being told (a bus message lost while
/// the node was cut off from the database for over a minute).
pub const RESYNC: Duration = Duration::from_secs(10);

/// Suffix a file the fleet's set does not have is moved aside with at start-up.
pub const SET_ASIDE: &str = "unpublished";

/// A node's side of the fleet's plugin set.
pub struct FleetPlugins {
    runtime: Runtime,
    store: Store,
    /// Who publishes: this node's name in the fleet.
    node: String,
    /// File name → the content this node last agreed with the set on.
    agreed: Mutex<HashMap<String, String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum FleetPluginError {
    #[error("the fleet's plugin set: {0}")]
    Store(#[from] StoreError),
    #[error("cannot write {path} into the plugins folder: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "the fleet's entry for {file:?} is not a plugin file name, or its content does not match its SHA-256"
    )]
    Corrupt { file: String },
}

impl FleetPlugins {
    /// The fleet side of `runtime`, when its store is shared and
    /// `plugins.fleet` is on.
    pub fn new(runtime: &Runtime, store: &Store, node: String) -> Option<Arc<FleetPlugins>> {
        (store.plugin_set().is_some() && runtime.inner.host.config.fleet).then(|| {
            Arc::new(FleetPlugins {
                runtime: runtime.clone(),
                store: store.clone(),
                node,
                agreed: Mutex::new(HashMap::new()),
            })
        })
    }

    fn set(&self) -> &dyn crate::store::plugin_set::PluginSet {
        self.store
            .plugin_set()
            .expect("FleetPlugins exists only on a shared store")
    }

    /// At start-up, before the folder is loaded: seed the set from the
    /// folder if the database has none yet, else bring the folder in line
    /// with the set.
    pub async fn join(&self) -> Result<(), FleetPluginError> {
        let seed: Vec<(String, String, Vec<u8>)> = self
            .read_folder()
            .into_iter()
            .map(|(file, bytes)| (file, crate::crypto::sha256_hex(&bytes), bytes))
            .collect();
        if self.set().seed(&seed, &self.node).await? {
            tracing::info!(
                files = seed.len(),
                "the fleet had no plugin set: seeded it from this node's folder"
            );
            let mut agreed = self.agreed.lock().await;
            agreed.extend(seed.into_iter().map(|(file, sha, _)| (file, sha)));
            return Ok(());
        }
        let published = self.set().published().await?;
        for (file, _, _) in &seed {
            if !published.iter().any(|p| &p.file == file) {
                self.set_aside(file);
            }
        }
        let mut agreed = self.agreed.lock().await;
        for plugin in &published {
            // Read and hashed above already: a file in step is not read again.
            let in_step = seed
                .iter()
                .any(|(file, sha, _)| *file == plugin.file && *sha == plugin.sha256);
            if in_step {
                agreed.insert(plugin.file.clone(), plugin.sha256.clone());
            } else if let Err(error) = self.mirror(plugin, &mut agreed).await {
                tracing::error!(file = %plugin.file, %error, "cannot take the fleet's version of a plugin at start-up; it is retried at the next resync");
            }
        }
        tracing::info!(
            files = published.len(),
            "plugins folder in line with the fleet's set"
        );
        Ok(())
    }

    /// Follow the set while the node runs: on every bus message about it,
    /// and every [`RESYNC`].
    pub async fn follow(self: Arc<Self>) {
        let mut bus = self.store.subscribe();
        let mut every = tokio::time::interval(RESYNC);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                message = bus.recv() => match message {
                    Ok(message) if message.topic != TOPIC => continue,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = every.tick() => {}
            }
            match self.sync().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("the fleet's plugin set is readable again");
                }
                Ok(()) => {}
                // Said once per outage: the store's own errors say the rest.
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(%error, "cannot follow the fleet's plugin set; retrying");
                }
                Err(_) => {}
            }
        }
    }

    /// Bring the folder in line with the set: load what changed, withdraw
    /// what the set no longer has.
    pub async fn sync(&self) -> Result<(), FleetPluginError> {
        let published = self.set().published().await?;
        let mut agreed = self.agreed.lock().await;
        let mut changed = Vec::new();
        for plugin in &published {
            if agreed.get(&plugin.file) != Some(&plugin.sha256) {
                if let Err(error) = self.mirror(plugin, &mut agreed).await {
                    tracing::error!(file = %plugin.file, %error, "cannot take the fleet's version of a plugin; this node keeps its own");
                    continue;
                }
                changed.push(plugin.file.clone());
            }
        }
        let gone: Vec<String> = agreed
            .keys()
            .filter(|file| !published.iter().any(|p| &p.file == *file))
            .cloned()
            .collect();
        for file in gone {
            agreed.remove(&file);
            let path = self.path(&file);
            match std::fs::remove_file(&path) {
                Ok(()) => changed.push(file),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::error!(file = %path.display(), %error, "cannot remove a plugin the fleet unpublished")
                }
            }
        }
        drop(agreed);
        for file in changed {
            self.runtime.reload(&self.path(&file)).await;
        }
        Ok(())
    }

    /// The folder changed at `path` and the runtime has reloaded it: publish
    /// what this node now serves there, or unpublish what was removed.
    pub async fn folder_changed(&self, path: &Path) {
        let Some(file) = path.file_name().map(|name| name.to_string_lossy().into_owned()) else {
            return;
        };
        let result = if std::fs::symlink_metadata(path).is_err() {
            self.removed(&file).await
        } else {
            self.replaced(&file, path).await
        };
        if let Err(error) = result {
            tracing::error!(%file, %error, "cannot tell the fleet about a change of the plugins folder");
        }
    }

    async fn removed(&self, file: &str) -> Result<(), FleetPluginError> {
        let mut agreed = self.agreed.lock().await;
        if agreed.remove(file).is_some() && self.set().unpublish(file).await? {
            drop(agreed);
            tracing::info!(%file, "plugin removed from this node's folder: unpublished from the fleet");
            self.announce(file, None).await;
        }
        Ok(())
    }

    async fn replaced(&self, file: &str, path: &Path) -> Result<(), FleetPluginError> {
        let mut agreed = self.agreed.lock().await;
        let Some(serving) = self
            .runtime
            .registry()
            .by_file(path)
            .map(|p| p.content_hash.clone())
        else {
            return Ok(()); // Not loaded here (it failed, and says so in /health): not published.
        };
        if agreed.get(file) == Some(&serving) {
            return Ok(());
        }
        let bytes = match self.read(path) {
            Some(bytes) if crate::crypto::sha256_hex(&bytes) == serving => bytes,
            // Changed again since the load: the watcher brings that change next.
            _ => return Ok(()),
        };
        self.set().publish(file, &serving, &bytes, &self.node).await?;
        agreed.insert(file.to_owned(), serving.clone());
        drop(agreed);
        tracing::info!(%file, sha256 = %serving, "plugin changed in this node's folder: published to the fleet");
        self.announce(file, Some(&serving)).await;
        Ok(())
    }

    /// Tell the other nodes; they also find the change at their next [`RESYNC`].
    async fn announce(&self, file: &str, sha256: Option<&str>) {
        if let Err(error) = announce(&self.store, file, sha256).await {
            tracing::warn!(%file, %error, "cannot tell the fleet of a plugin change now; the nodes find it within their resync");
        }
    }

    /// Make the folder's `plugin.file` the set's content: written beside and
    /// renamed over, so the watcher never sees half a file.
    async fn mirror(
        &self,
        plugin: &PublishedPlugin,
        agreed: &mut HashMap<String, String>,
    ) -> Result<(), FleetPluginError> {
        if !is_plugin_file_name(&plugin.file) {
            return Err(FleetPluginError::Corrupt {
                file: plugin.file.clone(),
            });
        }
        let path = self.path(&plugin.file);
        let local = self.read(&path).map(|bytes| crate::crypto::sha256_hex(&bytes));
        if local.as_deref() != Some(plugin.sha256.as_str()) {
            let bytes =
                self.set()
                    .content(&plugin.sha256)
                    .await?
                    .ok_or_else(|| FleetPluginError::Corrupt {
                        file: plugin.file.clone(),
                    })?;
            if crate::crypto::sha256_hex(&bytes) != plugin.sha256 {
                return Err(FleetPluginError::Corrupt {
                    file: plugin.file.clone(),
                });
            }
            write_beside(&path, &bytes).map_err(|source| FleetPluginError::Write {
                path: path.clone(),
                source,
            })?;
            tracing::info!(file = %plugin.file, sha256 = %plugin.sha256, by = %plugin.published_by, "took the fleet's version of a plugin");
        }
        agreed.insert(plugin.file.clone(), plugin.sha256.clone());
        Ok(())
    }

    fn set_aside(&self, file: &str) {
        let path = self.path(file);
        let aside = self.path(&format!("{file}.{SET_ASIDE}"));
        match std::fs::rename(&path, &aside) {
            Ok(()) => {
                tracing::warn!(%file, moved_to = %aside.display(), "not in the fleet's plugin set: set aside (publish it with `agora-node plugin publish`, or drop it in while the node runs)")
            }
            Err(error) => {
                tracing::error!(%file, %error, "not in the fleet's plugin set, and cannot be set aside; it will load here only")
            }
        }
    }

    /// Every plugin file in the folder, read (what cannot be read is left out: its load says why).
    fn read_folder(&self) -> Vec<(String, Vec<u8>)> {
        let Ok(entries) = std::fs::read_dir(self.runtime.plugins_dir()) else {
            return Vec::new();
        };
        let mut files: Vec<(String, Vec<u8>)> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path())
            .filter(|path| loader::has_plugin_extension(path))
            .filter_map(|path| {
                let bytes = self.read(&path)?;
                Some((path.file_name()?.to_string_lossy().into_owned(), bytes))
            })
            .collect();
        files.sort();
        files
    }

    fn read(&self, path: &Path) -> Option<Vec<u8>> {
        loader::read_plugin_file(path, self.runtime.inner.host.config.max_file_mb << 20).ok()
    }

    fn path(&self, file: &str) -> PathBuf {
        self.runtime.plugins_dir().join(file)
    }
}

/// Tell every node, on the fleet bus, that `file` of the set changed to
/// `sha256` (or left the set): what any publisher does after changing the set,
/// a node, `agora-node plugin` or the bench alike.
pub async fn announce(store: &Store, file: &str, sha256: Option<&str>) -> Result<(), StoreError> {
    let message = serde_json::json!({ "file": file, "sha256": sha256 });
    store.publish(TOPIC, &message).await
}

/// Whether `file` may name a file of the set: a plain `.wasm` name, no folder.
pub fn is_plugin_file_name(file: &str) -> bool {
    !file.is_empty()
        && !file.starts_with('.')
        && !file.contains(['/', '\\', '\0'])
        && file.len() <= 255
        && loader::has_plugin_extension(Path::new(file))
}

/// Write `bytes` to a hidden file beside `path`, then rename it over `path`.
fn write_beside(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.fleet-{}", std::process::id()));
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}
