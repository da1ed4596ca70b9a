//! `GET /health` (overall status and every plugin file with its routes or its
//! load error) and `GET /metrics` (Prometheus text).
//!
//! The status is `starting` while the start-up load compiles (each plugin file
//! `pending`, `compiling`, `loaded` or `failed`, with counts), then `ok`, or
//! `degraded` when a plugin file failed to load; each loaded plugin shows the
//! SHA-256 of its file, so an operator sees whether a fleet runs one version.
//! When the store does not answer (a fleet's database is down) it is
//! `unavailable` with HTTP 503, which takes the node out of a load balancer's
//! rotation until the store is back.
//!
//! `/health` is public on an open port, so it names plugin files by their
//! file name only and strips the node's folders from load errors: where the
//! node keeps its data is nobody's business but the operator's, who has the
//! log (which keeps full paths).

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::node::state::NodeState;
use crate::runtime::{LoadState, PluginStatus};

pub fn router(state: NodeState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn health(State(state): State<NodeState>) -> impl IntoResponse {
    let (code, body) = report(&state).await;
    (code, axum::Json(body))
}

/// The node's health as `/health` answers it; a fleet's heartbeat carries the same.
pub async fn report(state: &NodeState) -> (StatusCode, serde_json::Value) {
    let folders = private_folders(state);
    let plugins: Vec<PluginStatus> = state
        .runtime
        .status()
        .into_iter()
        .map(|status| public_status(status, &folders))
        .collect();
    let degraded = plugins.iter().any(|p| p.error.is_some());
    // A node whose store does not answer cannot serve: a load balancer reading
    // 503 here sends its clients to the other nodes until the store is back.
    let store_error = state.store.unavailable().await;
    let status = if store_error.is_some() {
        "unavailable"
    } else if state.runtime.is_starting() {
        "starting"
    } else if degraded {
        "degraded"
    } else {
        "ok"
    };
    let count = |state| plugins.iter().filter(|p| p.state == state).count();
    let code = if store_error.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = json!({
        "status": status,
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": state.started.elapsed().as_secs(),
        "counts": {
            "pending": count(LoadState::Pending),
            "compiling": count(LoadState::Compiling),
            "loaded": count(LoadState::Loaded),
            "failed": count(LoadState::Failed),
        },
        "store": {
            "backend": state.store.backend_name(),
            "status": if store_error.is_some() { "unavailable" } else { "ok" },
            "error": store_error,
        },
        "plugins": plugins,
    });
    (code, body)
}

/// The node's own folders as they may appear in messages, longest first so a
/// folder inside another is removed whole.
fn private_folders(state: &NodeState) -> Vec<String> {
    let config = &state.config;
    let mut folders: Vec<String> = [&config.plugins.dir, &config.plugins.cache_dir, &config.data_dir]
        .into_iter()
        .flat_map(|dir| {
            let shown = dir.display().to_string();
            let absolute = std::path::absolute(dir)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            [shown, absolute]
        })
        .filter(|folder| folder.len() > 1)
        .collect();
    folders.sort_by_key(|folder| std::cmp::Reverse(folder.len()));
    folders.dedup();
    folders
}

fn public_status(mut status: PluginStatus, folders: &[String]) -> PluginStatus {
    status.file = std::path::Path::new(&status.file)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    status.error = status.error.map(|error| strip_folders(&error, folders));
    status
}

fn strip_folders(message: &str, folders: &[String]) -> String {
    let mut message = message.to_string();
    for folder in folders {
        message = message.replace(&format!("{folder}/"), "").replace(folder, "");
    }
    message
}

async fn metrics(State(state): State<NodeState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.runtime.metrics().render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_files_and_errors_lose_the_node_folders() {
        let folders = vec!["/srv/node/data/plugins".to_string(), "/srv/node/data".to_string()];
        let status = public_status(
            PluginStatus {
                file: "/srv/node/data/plugins/echo.wasm".into(),
                state: LoadState::Failed,
                name: None,
                version: None,
                routes: Vec::new(),
                content_sha256: None,
                error: Some(
                    "cannot compile /srv/node/data/plugins/echo.wasm (cache /srv/node/data/cache/x)".into(),
                ),
            },
            &folders,
        );
        assert_eq!(status.file, "echo.wasm");
        assert_eq!(
            status.error.as_deref(),
            Some("cannot compile echo.wasm (cache cache/x)")
        );
    }
}
