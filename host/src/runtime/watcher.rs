//! Hot reload: the plugins folder is watched (notify, debounced) and every
//! changed `.wasm` is reloaded off the request path.
//!
//! Only the plugins folder itself is watched, never recursively: build output
//! and caches landing in a watched tree made Spin's and wasmCloud's watchers
//! loop forever.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

use super::Runtime;

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

pub fn watch(runtime: Runtime) -> Result<PluginWatcher, notify::Error> {
    let dir = runtime.plugins_dir().to_path_buf();
    std::fs::create_dir_all(&dir).map_err(notify::Error::io)?;
    let debounce = Duration::from_millis(runtime.inner.config.reload_debounce_ms);
    let (changes, mut changed) = mpsc::unbounded_channel::<BTreeSet<PathBuf>>();
    let mut debouncer = new_debouncer(debounce, None, move |result: DebounceEventResult| match result {
        Ok(events) => {
            let paths: BTreeSet<PathBuf> = events
                .iter()
                .flat_map(|event| event.paths.iter())
                .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
                .cloned()
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
            }
        }
    });
    Ok(PluginWatcher {
        _debouncer: debouncer,
        task,
    })
}
