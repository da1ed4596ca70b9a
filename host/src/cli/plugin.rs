//! `agora-node plugin publish | unpublish | list`: the fleet's plugin set,
//! changed from any machine that reaches the fleet's database.
//!
//! The command reads the node's configuration (the same `--config` file and
//! `AGORA_*` variables) only for `[store]` and `plugins.max_file_mb`, writes
//! the set ([`crate::store::plugin_set`]) and tells the fleet on its bus; it
//! then follows the roll call ([`crate::store::roll_call`]) until every node
//! serves the new content or says why it does not, so the operator sees the
//! rollout finish, not just start.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::runtime::fleet_plugins::{self, is_plugin_file_name};
use crate::store::roll_call::{self, Heartbeat};
use crate::store::{Store, StoreError};

/// The first bytes of a WebAssembly component (the magic, then the component layer).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

/// Who a publish from the command line is recorded as.
const PUBLISHER: &str = "cli";

/// Publish `file` to the fleet; wait up to `wait` for every node to serve it.
pub async fn publish(config: &Config, file: &Path, wait: Duration) -> Result<bool, String> {
    let name = file
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !is_plugin_file_name(&name) {
        return Err(format!("{}: a plugin file is NAME.wasm", file.display()));
    }
    let limit = config.plugins.max_file_mb << 20;
    let size = std::fs::metadata(file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    if size > limit {
        return Err(format!(
            "{}: {size} bytes, over plugins.max_file_mb ({} MiB)",
            file.display(),
            config.plugins.max_file_mb
        ));
    }
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !bytes.starts_with(&COMPONENT_HEADER) {
        return Err(format!(
            "{}: not a WebAssembly component (build the plugin with the SDK: `cargo component build` or the scaffold's build line)",
            file.display()
        ));
    }
    let sha256 = crate::crypto::sha256_hex(&bytes);
    let store = fleet_store(config).await?;
    let set = store.plugin_set().ok_or_else(not_a_fleet)?;
    let changed = set
        .publish(&name, &sha256, &bytes, PUBLISHER)
        .await
        .map_err(store_error)?;
    announce(&store, &name, Some(&sha256)).await?;
    println!(
        "{} {name} (sha256 {sha256}, {} bytes)",
        if changed {
            "published"
        } else {
            "already published:"
        },
        bytes.len()
    );
    follow(&store, &name, Some(&sha256), wait).await
}

/// Take `name` (`trivia` or `trivia.wasm`) out of the fleet's set.
pub async fn unpublish(config: &Config, name: &str, wait: Duration) -> Result<bool, String> {
    let file = if name.ends_with(".wasm") {
        name.to_owned()
    } else {
        format!("{name}.wasm")
    };
    if !is_plugin_file_name(&file) {
        return Err(format!("{name}: not a plugin file name"));
    }
    let store = fleet_store(config).await?;
    let set = store.plugin_set().ok_or_else(not_a_fleet)?;
    if !set.unpublish(&file).await.map_err(store_error)? {
        return Err(format!(
            "{file} is not in the fleet's plugin set (`agora-node plugin list` shows it)"
        ));
    }
    announce(&store, &file, None).await?;
    println!("unpublished {file}");
    follow(&store, &file, None, wait).await
}

/// Print the fleet's set, and each node's view of it.
pub async fn list(config: &Config) -> Result<(), String> {
    let store = fleet_store(config).await?;
    let set = store.plugin_set().ok_or_else(not_a_fleet)?;
    let published = set.published().await.map_err(store_error)?;
    if published.is_empty() {
        println!("the fleet's plugin set is empty");
    }
    for plugin in &published {
        println!(
            "{}  sha256 {}  {} bytes  published by {}",
            plugin.file, plugin.sha256, plugin.size, plugin.published_by
        );
    }
    for heartbeat in roll_call::read(&store).await.map_err(store_error)? {
        let serving: Vec<String> = plugins_of(&heartbeat)
            .filter_map(|plugin| {
                let file = plugin["file"].as_str()?;
                let sha = plugin["content_sha256"].as_str().unwrap_or("-");
                Some(format!("{file}={}", &sha[..sha.len().min(12)]))
            })
            .collect();
        println!("node {}: {}", heartbeat.node, serving.join(" "));
    }
    Ok(())
}

async fn fleet_store(config: &Config) -> Result<Store, String> {
    crate::peers::tls::init(&config.tls.ca_file).map_err(|e| e.to_string())?;
    let store = crate::node::open_store(config).await.map_err(|e| e.to_string())?;
    if store.plugin_set().is_none() {
        return Err(not_a_fleet());
    }
    Ok(store)
}

fn not_a_fleet() -> String {
    "the fleet's plugin set lives in a shared store: set store.backend = \"postgres\" \
     (a node on its own serves its plugins folder: copy the file there)"
        .to_owned()
}

fn store_error(error: StoreError) -> String {
    format!("the fleet's database: {error}")
}

async fn announce(store: &Store, file: &str, sha256: Option<&str>) -> Result<(), String> {
    fleet_plugins::announce(store, file, sha256)
        .await
        .map_err(store_error)
}

/// Follow the roll call until every node serves `sha256` at `file` (or no
/// longer serves `file`, for `None`) or says why not; whether all did.
async fn follow(store: &Store, file: &str, sha256: Option<&str>, wait: Duration) -> Result<bool, String> {
    if wait.is_zero() {
        return Ok(true);
    }
    // A heartbeat written before the change says nothing about it.
    let since = crate::store::now_ms();
    let started = Instant::now();
    loop {
        let nodes = roll_call::read(store).await.map_err(store_error)?;
        let fresh: Vec<&Heartbeat> = nodes.iter().filter(|h| h.seen_at_ms > since).collect();
        let views: Vec<(String, NodeView)> = fresh
            .iter()
            .map(|heartbeat| (heartbeat.node.clone(), view(heartbeat, file, sha256)))
            .collect();
        let every_node_beat = !nodes.is_empty() && fresh.len() == nodes.len();
        if every_node_beat && views.iter().all(|(_, view)| !matches!(view, NodeView::Behind)) {
            let mut all_in_step = true;
            for (node, view) in &views {
                match view {
                    NodeView::InStep => println!("  {node}: in step"),
                    NodeView::Failed(error) => {
                        all_in_step = false;
                        println!("  {node}: keeps its previous version: {error}");
                    }
                    NodeView::Behind => unreachable!(),
                }
            }
            return Ok(all_in_step);
        }
        if started.elapsed() >= wait {
            println!(
                "after {} s, {} of {} nodes serve the change (the others may still be compiling; `agora-node plugin list` shows each node)",
                wait.as_secs(),
                views
                    .iter()
                    .filter(|(_, v)| matches!(v, NodeView::InStep))
                    .count(),
                nodes.len()
            );
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

enum NodeView {
    InStep,
    Behind,
    Failed(String),
}

fn view(heartbeat: &Heartbeat, file: &str, sha256: Option<&str>) -> NodeView {
    let entry = plugins_of(heartbeat).find(|plugin| plugin["file"] == file);
    match (entry, sha256) {
        (None, None) => NodeView::InStep,
        (Some(_), None) | (None, Some(_)) => NodeView::Behind,
        (Some(plugin), Some(sha)) => {
            if let Some(error) = plugin["error"].as_str() {
                NodeView::Failed(error.to_owned())
            } else if plugin["content_sha256"] == sha {
                NodeView::InStep
            } else {
                NodeView::Behind
            }
        }
    }
}

fn plugins_of(heartbeat: &Heartbeat) -> impl Iterator<Item = &serde_json::Value> {
    heartbeat.health["plugins"].as_array().into_iter().flatten()
}
