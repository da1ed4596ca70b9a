//! `GET {path}/api/log`: the node's last warnings and errors, as
//! [`crate::logging::recent`] keeps them (bounded, escaped), oldest first.
//! Filtering is the page's: the ring is small enough to send whole.

use axum::Json;
use serde_json::{Value, json};

pub async fn list() -> Json<Value> {
    Json(list_of())
}

pub fn list_of() -> Value {
    json!({ "entries": crate::logging::recent::recent().entries() })
}
