//! `agora-node dev`: the node plus a rebuild loop. Plugin source crates under
//! `plugins.sources_dir` are watched; a save rebuilds that crate for
//! `wasm32-wasip2` and drops the `.wasm` into the plugins folder, where hot
//! reload takes over. Build output (`target/`) is never watched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

/// A plugin crate found under the sources folder.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PluginCrate {
    pub dir: PathBuf,
    pub package: String,
}

/// Crates directly under `sources` (each a folder with a Cargo.toml naming a package).
pub fn find_crates(sources: &Path) -> Vec<PluginCrate> {
    let Ok(entries) = std::fs::read_dir(sources) else {
        return Vec::new();
    };
    let mut crates: Vec<PluginCrate> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml")).ok()?;
            let package = manifest
                .lines()
                .skip_while(|line| line.trim() != "[package]")
                .find_map(|line| {
                    line.trim().strip_prefix("name").map(|rest| {
                        rest.trim_start_matches([' ', '='])
                            .trim()
                            .trim_matches('"')
                            .to_string()
                    })
                })?;
            Some(PluginCrate {
                dir: entry.path(),
                package,
            })
        })
        .collect();
    crates.sort();
    crates
}

/// Build one crate and install its component into `plugins_dir` atomically.
pub async fn build_and_install(
    krate: &PluginCrate,
    target_dir: &Path,
    plugins_dir: &Path,
) -> Result<PathBuf, String> {
    let output = tokio::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--profile",
            "plugin",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(target_dir)
        .args(["-p", &krate.package])
        .current_dir(&krate.dir)
        .output()
        .await
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let file_name = format!("{}.wasm", krate.package.replace('-', "_"));
    let built = target_dir.join("wasm32-wasip2/plugin").join(&file_name);
    std::fs::create_dir_all(plugins_dir).map_err(|e| e.to_string())?;
    let installed = plugins_dir.join(format!("{}.wasm", krate.package));
    let temp = plugins_dir.join(format!(".{}.wasm.tmp", krate.package));
    std::fs::copy(&built, &temp).map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    std::fs::rename(&temp, &installed).map_err(|e| e.to_string())?;
    Ok(installed)
}

/// Rebuild every crate once, then on each save. Runs until the task is dropped.
pub async fn rebuild_loop(
    sources: PathBuf,
    target_dir: PathBuf,
    plugins_dir: PathBuf,
) -> Result<(), notify::Error> {
    for krate in find_crates(&sources) {
        report(&krate, build_and_install(&krate, &target_dir, &plugins_dir).await);
    }
    let (changes, mut changed) = mpsc::unbounded_channel::<BTreeSet<PathBuf>>();
    let root = std::path::absolute(&sources).unwrap_or_else(|_| sources.clone());
    let mut debouncer = new_debouncer(
        Duration::from_millis(300),
        None,
        move |result: DebounceEventResult| {
            if let Ok(events) = result {
                let paths: BTreeSet<PathBuf> = events
                    .iter()
                    .flat_map(|event| event.paths.iter())
                    .filter(|path| is_source(&root, path))
                    .cloned()
                    .collect();
                if !paths.is_empty() {
                    let _ = changes.send(paths);
                }
            }
        },
    )?;
    debouncer.watch(&sources, RecursiveMode::Recursive)?;
    tracing::info!(sources = %sources.display(), "dev mode: rebuilding plugins on save");
    while let Some(paths) = changed.recv().await {
        let crates = find_crates(&sources);
        let touched: BTreeSet<&PluginCrate> = crates
            .iter()
            .filter(|krate| paths.iter().any(|path| path.starts_with(&krate.dir)))
            .collect();
        for krate in touched {
            report(krate, build_and_install(krate, &target_dir, &plugins_dir).await);
        }
    }
    Ok(())
}

/// Sources only: never build output, caches or editor droppings (judged below `root`,
/// so a sources folder that itself sits under a dot-folder still works).
fn is_source(root: &Path, path: &Path) -> bool {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let in_output = relative.components().any(|c| {
        let part = c.as_os_str().to_string_lossy();
        part == "target" || part.starts_with('.')
    });
    !in_output
        && path
            .extension()
            .is_some_and(|ext| matches!(ext.to_str(), Some("rs" | "toml" | "md" | "wit" | "json")))
}

fn report(krate: &PluginCrate, result: Result<PathBuf, String>) {
    match result {
        Ok(installed) => {
            tracing::info!(plugin = %krate.package, file = %installed.display(), "plugin rebuilt")
        }
        Err(error) => {
            tracing::error!(plugin = %krate.package, "plugin build failed; the previous version keeps serving\n{error}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_told_from_build_output_below_the_root() {
        let root = Path::new("/tmp/.hidden/sources");
        assert!(is_source(root, &root.join("demo/src/lib.rs")));
        assert!(is_source(root, &root.join("demo/Cargo.toml")));
        assert!(!is_source(root, &root.join("demo/target/debug/build.rs")));
        assert!(!is_source(root, &root.join("demo/.git/config.toml")));
        assert!(!is_source(root, &root.join("demo/src/lib.rs.swp")));
    }
}
