//! Plugin settings follow the configuration file while the node runs.
//!
//! The file's folder is watched, not the file: editors save by writing a new
//! file and renaming it over the old one, and Kubernetes swaps a symlink, and
//! either replaces the inode a file watch would hold. On each change the whole
//! configuration is read again through the same layers as at start-up; when it
//! is valid, every plugin's `[plugins.NAME.*]` settings are swapped in for the
//! next call. Everything else (listeners, limits, the store) is fixed at
//! start-up, so a change there is logged as needing a restart rather than half
//! applied. An invalid file changes nothing and says why.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

use crate::config::{CliOverrides, Config};
use crate::runtime::Runtime;

/// Quiet time after a write before the file is read again.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Keeps the watch alive; dropping it stops following the file.
pub struct ConfigWatcher {
    _debouncer:
        notify_debouncer_full::Debouncer<notify::RecommendedWatcher, notify_debouncer_full::RecommendedCache>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Follow `file` (`--config`), or `config/agora.toml` when it exists; `None`
/// when there is no file to follow (embedded defaults and environment only).
pub fn watch(
    runtime: Runtime,
    file: Option<PathBuf>,
    overrides: CliOverrides,
) -> Result<Option<ConfigWatcher>, notify::Error> {
    let explicit = file.is_some();
    let path = file.unwrap_or_else(|| PathBuf::from("config/agora.toml"));
    if !explicit && !path.is_file() {
        return Ok(None);
    }
    let path = std::path::absolute(&path).map_err(notify::Error::io)?;
    let (Some(folder), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(None);
    };
    let name = name.to_owned();
    let (changes, mut changed) = mpsc::unbounded_channel::<()>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        let Ok(events) = result else { return };
        let touches_file = events
            .iter()
            .filter(|event| crate::runtime::watcher::changes_content(&event.kind))
            .flat_map(|event| event.paths.iter())
            .any(|changed| changed.file_name() == Some(name.as_os_str()));
        if touches_file {
            let _ = changes.send(());
        }
    })?;
    debouncer.watch(folder, RecursiveMode::NonRecursive)?;
    tracing::info!(file = %path.display(), "following the configuration file for plugin settings");
    let explicit_file = explicit.then(|| path.clone());
    let task = tokio::spawn(async move {
        let mut current = runtime.config_snapshot();
        while changed.recv().await.is_some() {
            current = apply(&runtime, &path, explicit_file.as_deref(), &overrides, current);
        }
    });
    Ok(Some(ConfigWatcher {
        _debouncer: debouncer,
        task,
    }))
}

/// Read the configuration again and apply its plugin settings; the
/// configuration now in force.
fn apply(
    runtime: &Runtime,
    path: &Path,
    explicit_file: Option<&Path>,
    overrides: &CliOverrides,
    current: Config,
) -> Config {
    let next = match Config::load(explicit_file, overrides) {
        Ok(next) => next,
        Err(error) => {
            tracing::warn!(file = %path.display(), %error, "configuration file not applied; plugin settings unchanged");
            return current;
        }
    };
    let changed = runtime.replace_plugin_settings(next.plugins.settings.clone());
    if !changed.is_empty() {
        tracing::info!(plugins = ?changed, "plugin settings changed; the next call sees them");
    }
    if without_plugin_settings(&current) != without_plugin_settings(&next) {
        tracing::warn!(file = %path.display(), "configuration changes outside [plugins.NAME.*] apply after a restart");
    }
    next
}

/// The configuration as JSON, less what applies without a restart.
fn without_plugin_settings(config: &Config) -> serde_json::Value {
    let mut config = config.clone();
    config.plugins.settings.clear();
    config.plugins.raw_settings.clear();
    serde_json::to_value(config).unwrap_or_default()
}
