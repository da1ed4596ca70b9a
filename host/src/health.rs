//! `GET /health` (overall status and every plugin file with its routes or its
//! load error) and `GET /metrics` (Prometheus text).

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::transports::NodeState;

pub fn router(state: NodeState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn health(State(state): State<NodeState>) -> impl IntoResponse {
    let plugins = state.runtime.status();
    let degraded = plugins.iter().any(|p| p.error.is_some());
    axum::Json(json!({
        "status": if degraded { "degraded" } else { "ok" },
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": state.started.elapsed().as_secs(),
        "plugins": plugins,
    }))
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
