//! Hot reload: the plugins folder is watched (notify, debounced) and every
//! changed `.wasm` is reloaded off the request path, then, on a fleet, told to
//! the fleet's plugin set ([`super::fleet_plugins`]).
//!
//! Only the plugins folder itself is watched, never recursively: build output
//! and caches landing in a watched tree made Spin's and wasmCloud's watchers
//! loop forever.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::ModifyKind;
use notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

use super::Runtime;
use super::fleet_plugins::FleetPlugins;

/// Keeps the watch alive; dropping it stops hot reload.
pub struct PluginWatcher {
    _debouncer:
        notify_debouncer_full::Debouncer<notify::RecommendedWatcher, notify_debouncer_full::RecommendedCache>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PluginWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watch the plugins folder; each change is reloaded, then told to the fleet
/// when the node serves a fleet's plugin set (`fleet`).
pub fn watch(runtime: Runtime, fleet: Option<Arc<FleetPlugins>>) -> Result<PluginWatcher, notify::Error> {
    let dir = runtime.plugins_dir().to_path_buf();
    std::fs::create_dir_all(&dir).map_err(notify::Error::io)?;
    let debounce = Duration::from_millis(runtime.inner.host.config.reload_debounce_ms);
    let (changes, mut changed) = mpsc::unbounded_channel::<BTreeSet<PathBuf>>();
    let folder = dir.clone();
    let mut debouncer = new_debouncer(debounce, None, move |result: DebounceEventResult| match result {
        Ok(events) => {
            let paths: BTreeSet<PathBuf> = events
                .iter()
                .filter(|event| changes_content(&event.kind))
                .flat_map(|event| event.paths.iter())
                .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
                .filter_map(|path| in_folder(&folder, path))
                .collect();
            if !paths.is_empty() {
                let _ = changes.send(paths);
            }
        }
        Err(errors) => {
            for error in errors {
                tracing::warn!(%error, "plugin folder watch error");
            }
        }
    })?;
    debouncer.watch(&dir, RecursiveMode::NonRecursive)?;
    tracing::info!(dir = %dir.display(), "watching plugins for changes");
    let task = tokio::spawn(async move {
        while let Some(paths) = changed.recv().await {
            for path in paths {
                runtime.reload(&path).await;
                if let Some(fleet) = &fleet {
                    fleet.folder_changed(&path).await;
                }
            }
        }
    });
    Ok(PluginWatcher {
        _debouncer: debouncer,
        task,
    })
}

/// Whether an event can change a file's content. Reads are reported too (inotify
/// open/close): a node loading its plugins, or `agora-node dev` building and scanning
/// sources, reads every file it watches, and letting those through made each load or
/// build trigger the next, round and round.
/// The path the registry knows a reported plugin file by. notify reports
/// absolute (canonical) paths, while the registry keys each plugin by the
/// configured folder joined with its file name, which may be relative
/// (`data/plugins` by default); the watch is not recursive, so the name is enough.
fn in_folder(folder: &Path, reported: &Path) -> Option<PathBuf> {
    reported.file_name().map(|name| folder.join(name))
}

pub(crate) fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Any => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(_) | EventKind::Other => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_file_is_named_as_the_registry_names_it() {
        let reported = Path::new("/srv/node/data/plugins/trivia.wasm");
        assert_eq!(
            in_folder(Path::new("data/plugins"), reported),
            Some(PathBuf::from("data/plugins/trivia.wasm"))
        );
        assert_eq!(
            in_folder(Path::new("/srv/node/data/plugins"), reported),
            Some(reported.to_path_buf())
        );
    }

    #[test]
    fn reading_a_source_is_not_a_change() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, MetadataKind};
        assert!(!changes_content(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!changes_content(&EventKind::Modify(ModifyKind::Metadata(
            MetadataKind::AccessTime
        ))));
        // A save is reported as a data change before its close-after-write.
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes_content(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(changes_content(&EventKind::Create(CreateKind::File)));
    }
}
