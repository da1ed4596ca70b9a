//! Row 15 (issue 40): a plugin published to a fleet → every node answers
//! with the new version, for fleets of two and of three nodes on one
//! PostgreSQL.
//!
//! Each publish is a new build of the versioned fixture put in the fleet's
//! set the way `agora-node plugin publish` puts it (the set, then a message on
//! the fleet bus), from this process; the clock stops when the last node
//! answers an Agora request with the new build's marker. So a sample is the
//! bus's delivery, each node's download of the content, its compile (a new
//! content is never in the compile cache) and its swap, the nodes working at
//! once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_node::store::Store;
use agora_node::store::postgres::PostgresBackend;
use agora_test_postgres::Postgres;
use anyhow::{Result, anyhow};
use bytes::Bytes;
use serde_json::json;

use crate::fixture::{VERSIONED_DOCUMENT, agora_success, agora_target, sha1_hex, temp_dir, versioned_build};
use crate::load;
use crate::procs::{self, NodeSpec, Server};
use crate::report::{Row, verdict};
use crate::settings::Settings;

/// How long one publish may take to reach every node before the row fails.
const PATIENCE: Duration = Duration::from_secs(60);

pub async fn row15(settings: &Settings) -> Result<Row> {
    let publishes: u32 = if settings.smoke { 2 } else { 20 };
    let original = std::fs::read(procs::plugin_wasm("fixture-versioned")?)?;
    let mut cells = Vec::new();
    let mut raw = serde_json::Map::new();
    for nodes in [2usize, 3] {
        let postgres = Postgres::start();
        let database = postgres.create_database();
        let dirs: Vec<tempfile::TempDir> = (0..nodes).map(|_| temp_dir()).collect::<Result<_>>()?;
        let env = [
            ("AGORA_STORE__BACKEND", "postgres".to_string()),
            ("AGORA_STORE__POSTGRES_URL", database.clone()),
        ];
        let mut servers: Vec<Server> = Vec::new();
        for dir in &dirs {
            servers.push(
                procs::start_node(&NodeSpec {
                    binary: &settings.node_bin,
                    data_dir: dir.path(),
                    plugins: &[],
                    env: &env,
                })?
                .0,
            );
        }
        let mut config = agora_node::config::Config::defaults().store;
        config.postgres_url = database;
        let store = Store::new(Arc::new(
            PostgresBackend::connect(&config, std::path::Path::new(""))
                .await
                .map_err(|e| anyhow!("connecting to the bench database: {e}"))?,
        ));
        let mut times_ms = Vec::new();
        // Build 0 is the warm-up: every node's first load of the fixture.
        for version in 0..=publishes {
            let took =
                publish_and_wait(&store, &servers, &versioned_build(&original, version)?, version).await?;
            if version > 0 {
                times_ms.push(took.as_secs_f64() * 1000.0);
            }
        }
        times_ms.sort_by(|a, b| a.total_cmp(b));
        let quantile = |q: f64| times_ms[((times_ms.len() as f64 - 1.0) * q).round() as usize];
        let (p50, p99) = (quantile(0.5), quantile(0.99));
        cells.push(format!("{nodes} nodes: p50 {p50:.0} ms, p99 {p99:.0} ms"));
        raw.insert(
            format!("{nodes}_nodes"),
            json!({"publish_to_all_ms": times_ms, "p50_ms": p50, "p99_ms": p99}),
        );
    }
    Ok(Row {
        id: 15,
        measure: format!(
            "Fleet publish: a new plugin build into the fleet's set → every node answers with it ({publishes} publishes)"
        ),
        node: cells.join("<br>"),
        comparison: "row 5 (one node, file replaced): the same compile and swap, without the database".into(),
        ratio: "—".into(),
        target: "measured (bounded by the 10 s resync if a bus message is lost)".into(),
        status: if settings.smoke {
            verdict(settings, true)
        } else {
            "measured".into()
        },
        raw: serde_json::Value::Object(raw),
    })
}

/// Publish `bytes` as `versioned.wasm`; how long until every node answers with `version`.
async fn publish_and_wait(store: &Store, servers: &[Server], bytes: &[u8], version: u32) -> Result<Duration> {
    let set = store
        .plugin_set()
        .ok_or_else(|| anyhow!("the bench database has no plugin set"))?;
    let sha256 = agora_node::crypto::sha256_hex(bytes);
    let request = Bytes::from(
        json!({"protocolHash": sha1_hex(VERSIONED_DOCUMENT.as_bytes()), "body": "which version?"})
            .to_string(),
    );
    let expected = format!("AGORA-VERSION-MARKER-{version:011}");
    let started = Instant::now();
    set.publish("versioned.wasm", &sha256, bytes, "bench")
        .await
        .map_err(|e| anyhow!("publishing: {e}"))?;
    agora_node::runtime::fleet_plugins::announce(store, "versioned.wasm", Some(&sha256))
        .await
        .map_err(|e| anyhow!("telling the fleet: {e}"))?;
    for server in servers {
        let mut poller = load::Client::new(agora_target(server, "/agora", request.clone(), agora_success()));
        loop {
            if let Ok((200, body)) = poller.send(request.clone()).await
                && body.windows(expected.len()).any(|w| w == expected.as_bytes())
            {
                break;
            }
            if started.elapsed() > PATIENCE {
                return Err(anyhow!(
                    "version {version} never served by {}:\n{}",
                    server.addr,
                    server.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(started.elapsed())
}
