//! The plugins, seen and changed from the console:
//! - `GET {path}/api/plugins`: one row per plugin file, as `/health` has it
//!   (state, the compiler's reason for a failure, content hash), with its
//!   size, language, compile time, tools and call counts;
//! - `GET {path}/api/plugins/{name}`: a plugin's manifest and the protocol
//!   documents it serves;
//! - `PUT {path}/api/plugins/{file}`: a `.wasm` uploaded, added or replacing
//!   `{file}.wasm` in the plugins folder;
//! - `DELETE {path}/api/plugins/{file}`: `{file}.wasm` removed.
//!
//! An upload is a file dropped into the folder, nothing more: it is written
//! beside the others under a name the watcher ignores, renamed into place,
//! and loaded by the runtime's own reload, so the folder's rules hold as they
//! are — a file that fails to compile leaves the version serving before it
//! serving, and says why. The answer waits for that load, so the operator
//! sees the outcome (200, or 422 with the compiler's reason); a load longer
//! than half the request timeout (a large component on a cold compile cache)
//! is answered 202 while it goes on, and the plugins event tells the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::ConsoleError;
use crate::node::state::NodeState;
use crate::runtime::{LoadedPlugin, PluginStatus};
use crate::store::now_ms;

/// The longest upload name taken (before `.wasm`).
const MAX_FILE_NAME: usize = 64;

pub async fn list(State(node): State<NodeState>) -> Json<Value> {
    Json(list_of(&node).await)
}

pub async fn list_of(node: &NodeState) -> Value {
    let mut rows = Vec::new();
    for status in node.runtime.status() {
        rows.push(row(node, status).await);
    }
    json!({ "plugins": rows })
}

/// One plugin file: its status as `/health` has it, and, for the version
/// serving, its size, tools with their risk and how its calls went (the size
/// of the file on disk when nothing serves from it).
async fn row(node: &NodeState, status: PluginStatus) -> Value {
    let registry = node.runtime.registry();
    let serving = registry.by_file(Path::new(&status.file));
    // The version serving, like the hash and version beside it; the file on disk
    // only when nothing serves from it.
    let size = match serving {
        Some(plugin) => Some(plugin.size),
        None => tokio::fs::metadata(&status.file)
            .await
            .ok()
            .map(|meta| meta.len()),
    };
    let tools: Vec<Value> = serving
        .map(|plugin| {
            plugin
                .manifest
                .tools
                .iter()
                .map(|tool| json!({"name": tool.name, "risk": tool.risk.as_str(), "description": tool.description}))
                .collect()
        })
        .unwrap_or_default();
    let stats = status
        .name
        .as_deref()
        .map(|name| node.runtime.metrics().recent.plugin(name, now_ms()));
    json!({
        "name": status.name,
        "version": status.version,
        "file": status.file,
        "size": size,
        "sha256": status.content_sha256,
        "state": status.state,
        "error": status.error,
        "routes": status.routes,
        "tools": tools,
        "language": serving.and_then(|plugin| plugin.language),
        "loaded_at_ms": serving.map(|plugin| plugin.loaded_at_ms),
        "compile_ms": serving.map(|plugin| plugin.compile_ms),
        "stats": stats.unwrap_or_default(),
    })
}

/// `GET {path}/api/plugins/{name}`: the manifest of the version serving, and its protocol documents whole.
pub async fn show(
    State(node): State<NodeState>,
    UrlPath(name): UrlPath<String>,
) -> Result<Json<Value>, ConsoleError> {
    let registry = node.runtime.registry();
    let plugin = registry
        .by_name(&name)
        .ok_or_else(|| ConsoleError::NotFound(format!("no plugin named {name:?} is serving")))?;
    Ok(Json(manifest_of(plugin)))
}

fn manifest_of(plugin: &LoadedPlugin) -> Value {
    let manifest = &plugin.manifest;
    let protocols: Vec<Value> = manifest
        .protocols
        .iter()
        .map(|document| json!({"hash": document.hash, "text": document.text}))
        .collect();
    json!({
        "name": manifest.name,
        "version": manifest.version,
        "description": manifest.description,
        "file": plugin.file.display().to_string(),
        "manifest": manifest,
        "protocols": protocols,
    })
}

/// `PUT {path}/api/plugins/{file}`: the body becomes `{file}.wasm` (see the module docs).
pub async fn upload(
    State(node): State<NodeState>,
    UrlPath(file): UrlPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ConsoleError> {
    let target = plugin_file(&node, &file)?;
    let body = body.map_err(|rejection| too_big_or(rejection, &node))?;
    if body.is_empty() {
        return Err(ConsoleError::BadRequest(
            "the body must be the plugin's .wasm file".into(),
        ));
    }
    let staging = node.runtime.plugins_dir().join(format!(".{file}.wasm.upload"));
    let written = async {
        tokio::fs::write(&staging, &body).await?;
        tokio::fs::rename(&staging, &target).await
    }
    .await;
    if let Err(error) = written {
        let _ = tokio::fs::remove_file(&staging).await;
        return Err(ConsoleError::Failed(format!(
            "cannot write {}: {error}",
            target.display()
        )));
    }
    let sha256 = crate::crypto::sha256_hex(&body);
    // The load runs on even if this request ends first: a reload cut off
    // half-way would leave the file marked as compiling.
    let runtime = node.runtime.clone();
    let file = target.clone();
    let loading = node.background.spawn("console.upload", async move {
        runtime.reload(&file).await;
    });
    let wait = Duration::from_millis(node.config.http.request_timeout_ms) / 2;
    let loaded = tokio::time::timeout(wait, loading).await.is_ok();
    let status = status_of(&node, &target);
    let error = status.as_ref().and_then(|status| status.error.clone());
    let row = match status {
        Some(status) => row(&node, status).await,
        None => Value::Null,
    };
    if !loaded {
        tracing::info!(file = %target.display(), %sha256, "console: plugin uploaded, still compiling");
        return Ok((StatusCode::ACCEPTED, Json(json!({ "plugin": row }))));
    }
    match error {
        None => {
            tracing::info!(file = %target.display(), %sha256, "console: plugin uploaded and loaded");
            Ok((StatusCode::OK, Json(json!({ "plugin": row }))))
        }
        Some(error) => {
            tracing::info!(file = %target.display(), %sha256, %error, "console: plugin uploaded, not loaded; the previous version (if any) keeps serving");
            Ok((
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({ "error": error, "plugin": row })),
            ))
        }
    }
}

/// `DELETE {path}/api/plugins/{file}`: `{file}.wasm` removed, its routes withdrawn.
pub async fn remove(
    State(node): State<NodeState>,
    UrlPath(file): UrlPath<String>,
) -> Result<Json<Value>, ConsoleError> {
    let target = plugin_file(&node, &file)?;
    match tokio::fs::remove_file(&target).await {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(ConsoleError::NotFound(format!(
                "there is no plugin file {file}.wasm"
            )));
        }
        Err(error) => {
            return Err(ConsoleError::Failed(format!(
                "cannot remove {}: {error}",
                target.display()
            )));
        }
    }
    // Like an upload's load, the removal (its routes, then its data) runs on if this request ends first.
    let (runtime, removed) = (node.runtime.clone(), target.clone());
    let _ = node
        .background
        .spawn("console.remove", async move { runtime.reload(&removed).await })
        .await;
    tracing::info!(file = %target.display(), "console: plugin removed");
    Ok(Json(json!({ "removed": format!("{file}.wasm") })))
}

/// `{file}.wasm` in the plugins folder, for a name that cannot leave it or hide in it.
fn plugin_file(node: &NodeState, file: &str) -> Result<PathBuf, ConsoleError> {
    let sane = !file.is_empty()
        && file.len() <= MAX_FILE_NAME
        && !file.starts_with('-')
        && file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    if !sane {
        return Err(ConsoleError::BadRequest(format!(
            "a plugin file name is 1 to {MAX_FILE_NAME} letters, digits, '-' or '_' (without .wasm)"
        )));
    }
    Ok(node.runtime.plugins_dir().join(format!("{file}.wasm")))
}

fn status_of(node: &NodeState, file: &Path) -> Option<PluginStatus> {
    let shown = file.display().to_string();
    node.runtime
        .status()
        .into_iter()
        .find(|status| status.file == shown)
}

/// An upload over `plugins.max_file_mb` says the limit; any other unreadable body says why.
fn too_big_or(rejection: BytesRejection, node: &NodeState) -> ConsoleError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        let limit = node.config.plugins.max_file_mb;
        return ConsoleError::Body {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("Payload Too Large: a plugin file is at most plugins.max_file_mb = {limit} MiB"),
        };
    }
    ConsoleError::Body {
        status: rejection.status(),
        message: rejection.body_text(),
    }
}
