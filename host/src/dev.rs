//! `agora-node dev`: the node plus a rebuild loop. Plugin sources under
//! `plugins.sources_dir` are watched; a save rebuilds that plugin into a
//! component and drops the `.wasm` into the plugins folder, where hot reload
//! takes over. A plugin folder is a Rust crate (`Cargo.toml`, built for
//! `wasm32-wasip2`), a JavaScript plugin (`package.json` with a `build`
//! script, componentize-js) or a Python plugin (`build.sh` beside `app.py`,
//! componentize-py); the latter two build to `dist/<name>.wasm`. Build output
//! and generated files (`target/`, `dist/`, `build/`, `node_modules/`) are
//! never watched, so a build cannot trigger itself.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

/// The toolchain that turns a plugin folder into a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Language {
    Rust,
    JavaScript,
    Python,
}

/// A plugin source folder found under the sources folder.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PluginCrate {
    pub dir: PathBuf,
    pub package: String,
    pub language: Language,
}

/// Plugin folders directly under `sources`: Rust crates (a Cargo.toml naming a
/// package), JavaScript plugins (a package.json with a name and a `build`
/// script) and Python plugins (`build.sh` and `app.py`, named by their folder).
pub fn find_crates(sources: &Path) -> Vec<PluginCrate> {
    let Ok(entries) = std::fs::read_dir(sources) else {
        return Vec::new();
    };
    let mut crates: Vec<PluginCrate> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let dir = entry.path();
            if let Some(package) = javascript_package(&dir) {
                return Some(PluginCrate {
                    dir,
                    package,
                    language: Language::JavaScript,
                });
            }
            if dir.join("build.sh").is_file() && dir.join("app.py").is_file() {
                let package = dir.file_name()?.to_str()?.to_string();
                return Some(PluginCrate {
                    dir,
                    package,
                    language: Language::Python,
                });
            }
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
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
                dir,
                package,
                language: Language::Rust,
            })
        })
        .collect();
    crates.sort();
    crates
}

/// The package name of a JavaScript plugin folder (package.json with a `build` script).
fn javascript_package(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
    let package: serde_json::Value = serde_json::from_str(&text).ok()?;
    package["scripts"]["build"].as_str()?;
    package["name"].as_str().map(str::to_string)
}

/// Run one build step, its stderr (and stdout) being the error when it fails.
async fn run_step(command: &mut tokio::process::Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .await
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// Build a JavaScript or Python plugin with its own build line; the component lands in `dist/`.
async fn build_scripted(krate: &PluginCrate) -> Result<PathBuf, String> {
    let dir = &krate.dir;
    match krate.language {
        Language::JavaScript => {
            // `npm install` rather than `npm ci`: it follows the lock file too, and
            // tolerates a registry mirror that lacks other platforms' optional binaries.
            if !dir.join("node_modules").is_dir() {
                run_step(
                    tokio::process::Command::new("npm")
                        .args(["install", "--no-audit", "--no-fund"])
                        .current_dir(dir),
                    "npm install",
                )
                .await?;
            }
            run_step(
                tokio::process::Command::new("npm")
                    .args(["run", "build"])
                    .current_dir(dir),
                "npm run build",
            )
            .await?;
        }
        Language::Python => {
            run_step(
                tokio::process::Command::new("bash")
                    .arg("build.sh")
                    .current_dir(dir),
                "build.sh",
            )
            .await?;
        }
        Language::Rust => unreachable!("Rust crates are built with cargo"),
    }
    Ok(dir
        .join("dist")
        .join(format!("{}.wasm", krate.package.replace('-', "_"))))
}

/// Build one plugin and install its component into `plugins_dir` atomically.
pub async fn build_and_install(
    krate: &PluginCrate,
    target_dir: &Path,
    plugins_dir: &Path,
) -> Result<PathBuf, String> {
    let built = if krate.language == Language::Rust {
        build_rust(krate, target_dir).await?
    } else {
        build_scripted(krate).await?
    };
    std::fs::create_dir_all(plugins_dir).map_err(|e| e.to_string())?;
    let installed = plugins_dir.join(format!("{}.wasm", krate.package));
    let temp = plugins_dir.join(format!(".{}.wasm.tmp", krate.package));
    std::fs::copy(&built, &temp).map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    std::fs::rename(&temp, &installed).map_err(|e| e.to_string())?;
    Ok(installed)
}

async fn build_rust(krate: &PluginCrate, target_dir: &Path) -> Result<PathBuf, String> {
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
    Ok(target_dir.join("wasm32-wasip2/plugin").join(&file_name))
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
                    .filter(|event| crate::runtime::watcher::changes_content(&event.kind))
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
        tracing::debug!(?paths, "plugin sources changed");
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

/// Sources only: never build output, generated files, dependencies, caches or editor
/// droppings (judged below `root`, so a sources folder that itself sits under a
/// dot-folder still works).
fn is_source(root: &Path, path: &Path) -> bool {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let in_output = relative.components().any(|c| {
        let part = c.as_os_str().to_string_lossy();
        matches!(
            part.as_ref(),
            "target" | "dist" | "build" | "node_modules" | "__pycache__" | "package-lock.json"
        ) || part.starts_with('.')
    });
    !in_output
        && path.extension().is_some_and(|ext| {
            matches!(
                ext.to_str(),
                Some("rs" | "toml" | "md" | "wit" | "json" | "js" | "mjs" | "py" | "sh" | "txt")
            )
        })
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
        assert!(is_source(root, &root.join("demo-js/src/plugin.js")));
        assert!(is_source(root, &root.join("demo-py/app.py")));
        assert!(!is_source(root, &root.join("demo-js/node_modules/x/index.js")));
        assert!(!is_source(root, &root.join("demo-js/build/document.js")));
        assert!(!is_source(root, &root.join("demo-py/build/document.py")));
        assert!(!is_source(root, &root.join("demo-py/__pycache__/app.py")));
        assert!(!is_source(root, &root.join("demo-js/package-lock.json")));
    }
}
