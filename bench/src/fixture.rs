//! What rows start and drive: scratch folders, fixed keys and protocol
//! hashes, the node with the unit converter (row 1's exchange, which rows 2 and
//! 14 reuse), the node with the `bench-hai` assistant (rows 6 and 13) and
//! the settings that let one driver address stand for many clients. Shared by
//! the rows of `rows.rs` and the row modules, none of which it knows.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use crate::load::{self, Target};
use crate::procs::{self, NodeSpec, Server};
use crate::settings::Settings;

pub(crate) fn sha1_hex(bytes: &[u8]) -> String {
    Sha1::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn converter_document() -> Result<String> {
    std::fs::read_to_string(procs::repo_root().join("protocols/unit-conversion.md"))
        .context("reading protocols/unit-conversion.md")
}

pub(crate) fn converter_query() -> Value {
    json!({"value": 5, "from": "km", "to": "m"})
}

pub(crate) fn agora_target(server: &Server, path: &str, body: Bytes, check: load::CheckFn) -> Target {
    Target {
        addr: server.addr,
        transport: Default::default(),
        path: path.into(),
        headers: Vec::new(),
        body: Arc::new(move |_, _| body.clone()),
        check,
    }
}

pub(crate) fn agora_success() -> load::CheckFn {
    Arc::new(|status, body| {
        status == 200 && serde_json::from_slice::<Value>(body).is_ok_and(|v| v["status"] == "success")
    })
}

pub(crate) fn temp_dir() -> Result<tempfile::TempDir> {
    let base = procs::repo_root().join("target/bench-tmp");
    std::fs::create_dir_all(&base)?;
    Ok(tempfile::tempdir_in(base)?)
}

/// The node with the unit converter (and `env`), and the exact request/reply of row 1.
pub(crate) async fn converter_node(
    settings: &Settings,
    data: &Path,
    env: &[(&'static str, String)],
) -> Result<(Server, Bytes, Bytes)> {
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data,
        plugins: &["unit-converter"],
        env,
    })?;
    let request = Bytes::from(
        json!({"protocolHash": sha1_hex(converter_document()?.as_bytes()), "body": converter_query()})
            .to_string(),
    );
    let probe = agora_target(&node, "/agora", request.clone(), agora_success());
    let (status, reply) = load::one(&probe, request.clone()).await?;
    let value: Value = serde_json::from_slice(&reply)?;
    if status != 200 || value["body"]["value"] != json!(5000.0) {
        return Err(anyhow!("the node did not convert: HTTP {status} {value}"));
    }
    Ok((node, request, reply))
}

/// One key per connection, fixed so runs are comparable.
pub(crate) fn envelope_keys(count: usize) -> Vec<SigningKey> {
    (0..count)
        .map(|i| {
            let mut seed = [7u8; 32];
            seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
            SigningKey::from_bytes(&seed)
        })
        .collect()
}

/// The driver opens every session from one loopback address, where the node
/// would see thousands of users' browsers: the per-address caps (and the total
/// connection cap, below 10,000) are lifted so the row measures sessions, not caps.
pub(crate) fn one_client_stands_for_many(extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = [
        "AGORA_HTTP__MAX_CONNECTIONS",
        "AGORA_HTTP__MAX_CONNECTIONS_PER_IP",
        "AGORA_HAI__MAX_LIVE_SESSIONS",
        "AGORA_HAI__MAX_LIVE_SESSIONS_PER_IP",
        "AGORA_HAI__NEW_SESSIONS_PER_IP_PER_MINUTE",
    ]
    .into_iter()
    .map(|name| (name, "100000".to_string()))
    .collect();
    // What one address may keep stored is for many clients, not for the load driver.
    for name in [
        "AGORA_HAI__MAX_STORED_SESSIONS_PER_CLIENT",
        "AGORA_HAI__MAX_STORED_SESSION_BYTES_PER_CLIENT",
        "AGORA_HAI__MAX_STORED_SESSION_BYTES",
    ] {
        env.push((name, u64::MAX.to_string()));
    }
    env.extend_from_slice(extra);
    env
}

/// A node with the `bench-hai` assistant for one client sending thousands of
/// messages (the per-session rate limit lifted too).
pub(crate) fn bench_hai_node(settings: &Settings, data: &Path) -> Result<Server> {
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data,
        plugins: &["bench-hai"],
        env: &one_client_stands_for_many(&[("AGORA_HAI__MESSAGES_PER_MINUTE", "1000000".into())]),
    })?;
    Ok(node)
}

/// The versioned fixture's build marker, rewritten per build.
const MARKER: &[u8] = b"AGORA-VERSION-MARKER-00000000000";
pub(crate) const VERSIONED_DOCUMENT: &str = "name: Versioned fixture\ndescription: reports its build marker\nmultiround: false\n---\nAnswers {\"version\": marker}.\n";

/// The versioned fixture (`original`) with its marker rewritten to `version`.
pub(crate) fn versioned_build(original: &[u8], version: u32) -> Result<Vec<u8>> {
    let at = original
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .ok_or_else(|| anyhow!("marker not found in the versioned fixture"))?;
    let mut bytes = original.to_vec();
    bytes[at..at + MARKER.len()].copy_from_slice(format!("AGORA-VERSION-MARKER-{version:011}").as_bytes());
    Ok(bytes)
}
