//! Rows 9 and 10 (issue 17): what sharing one PostgreSQL costs.
//!
//! Row 9 runs the same two exchanges against one node on sled and against two
//! nodes on one PostgreSQL (the load split evenly over them), alternating
//! segment by segment in one run. Row 10 isolates the fleet's replay check —
//! `Store::claim_once`, the atomic first claim of a key with an expiry — in process, through the
//! node's own `Store`, on both backends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_bench::floor;
use agora_node::store::postgres::PostgresBackend;
use agora_node::store::{Store, now_ms};
use agora_test_postgres::Postgres;
use anyhow::{Result, anyhow};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::fixture::{envelope_keys, sha1_hex, temp_dir};
use crate::load::{self, Segment, Target};
use crate::procs::{self, NodeSpec, Server};
use crate::report::{Row, fmt_rate, verdict};
use crate::settings::Settings;

/// One side of row 9: one node or two, each with its target.
struct Deployment<'a> {
    nodes: Vec<(&'a Server, Target)>,
}

impl Deployment<'_> {
    fn cpu_seconds(&self) -> f64 {
        self.nodes.iter().map(|(server, _)| server.cpu_seconds()).sum()
    }

    /// A closed loop over every node at once, the connections split evenly.
    async fn run(&self, connections: usize, duration: Duration, seq_base: u64) -> Segment {
        let per_node = (connections / self.nodes.len()).max(1);
        let runs = self.nodes.iter().enumerate().map(|(i, (_, target))| {
            load::closed_loop(
                target,
                per_node,
                Duration::ZERO,
                duration,
                seq_base + ((i as u64) << 28),
            )
        });
        let mut total = Segment::empty();
        for segment in futures::future::join_all(runs).await {
            total.merge(&segment);
        }
        // Both nodes ran over the same wall-clock window, not one after the other.
        total.elapsed = duration;
        total
    }
}

/// What row 9 measures of one exchange on each side.
struct Measured {
    segment: Segment,
    cpu_seconds: f64,
}

impl Measured {
    fn new() -> Measured {
        Measured {
            segment: Segment::empty(),
            cpu_seconds: 0.0,
        }
    }

    fn summary(&self) -> String {
        format!(
            "{} req/s, p50 {:.2} ms, p99 {:.2} ms, {:.2} cores; {} failed",
            fmt_rate(self.segment.rate()),
            self.segment.p(0.5),
            self.segment.p(0.99),
            self.cpu_seconds / self.segment.elapsed.as_secs_f64().max(1e-9),
            self.segment.failed
        )
    }

    fn json(&self) -> Value {
        json!({
            "ok": self.segment.ok, "failed": self.segment.failed,
            "first_failure": self.segment.first_failure,
            "rate_per_s": self.segment.rate(),
            "p50_ms": self.segment.p(0.5), "p99_ms": self.segment.p(0.99),
            "node_cpu_seconds": self.cpu_seconds,
        })
    }
}

fn guess_number_start(addr: std::net::SocketAddr) -> Result<Target> {
    let document = std::fs::read_to_string(procs::repo_root().join("protocols/guess-number.md"))?;
    let hash = sha1_hex(document.as_bytes());
    let body = Bytes::from(
        json!({"protocolHash": hash, "multiround": true, "body": {"start": {"min": 1, "max": 1000}}})
            .to_string(),
    );
    Ok(Target {
        addr,
        transport: Default::default(),
        path: "/agora".into(),
        headers: Vec::new(),
        body: Arc::new(move |_, _| body.clone()),
        check: Arc::new(|status, body| {
            status == 200
                && serde_json::from_slice::<Value>(body)
                    .is_ok_and(|v| v["status"] == "success" && v["conversationId"].is_string())
        }),
    })
}

fn envelope_request(addr: std::net::SocketAddr, connections: usize) -> Target {
    let keys = Arc::new(envelope_keys(connections));
    Target {
        addr,
        transport: Default::default(),
        path: "/envelopes".into(),
        headers: Vec::new(),
        body: Arc::new(move |conn, _| Bytes::from(floor::sum_request(&keys[conn % keys.len()]).to_string())),
        check: Arc::new(|status, body| {
            status == 200 && serde_json::from_slice::<Value>(body).is_ok_and(|v| v["type"] == "RESULT")
        }),
    }
}

/// The node settings both sides share: no limit of the node's own in the way of the load.
fn bench_env(extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "1000000000".to_string()),
        ("AGORA_AGORA__MAX_CONVERSATIONS", "100000000".to_string()),
        (
            "AGORA_AGORA__MAX_CONVERSATIONS_PER_CLIENT",
            "100000000".to_string(),
        ),
        (
            "AGORA_AGORA__CONVERSATIONS_PER_CLIENT_PER_MINUTE",
            "1000000000".to_string(),
        ),
    ];
    env.extend(extra.iter().cloned());
    env
}

const PLUGINS: &[&str] = &["guess-number", "envelope-services"];

/// One exchange's request, aimed at one node (`connections` for per-connection keys).
type MakeTarget = fn(std::net::SocketAddr, usize) -> Result<Target>;

pub async fn row9(settings: &Settings) -> Result<Row> {
    let postgres = Postgres::start();
    let database = postgres.create_database();
    let sled_dir = temp_dir()?;
    let (sled_node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: sled_dir.path(),
        plugins: PLUGINS,
        env: &bench_env(&[]),
    })?;
    let fleet_dirs = [temp_dir()?, temp_dir()?];
    let shared_env = bench_env(&[
        ("AGORA_STORE__BACKEND", "postgres".into()),
        ("AGORA_STORE__POSTGRES_URL", database.clone()),
    ]);
    let (first, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: fleet_dirs[0].path(),
        plugins: PLUGINS,
        env: &shared_env,
    })?;
    let mut second_env = shared_env.clone();
    second_env.push((
        "AGORA_IDENTITY__KEY_FILE",
        fleet_dirs[0].path().join("node.key").display().to_string(),
    ));
    let (second, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: fleet_dirs[1].path(),
        plugins: PLUGINS,
        env: &second_env,
    })?;

    let exchanges: [(&str, MakeTarget); 2] = [
        (
            "Agora multi-round start (record + history + plugin KV)",
            |addr, _| guess_number_start(addr),
        ),
        (
            "signed envelope REQUEST → RESULT (replay + status records)",
            |addr, connections| Ok(envelope_request(addr, connections)),
        ),
    ];
    let mut cells = Vec::new();
    let mut raw = serde_json::Map::new();
    let mut seq = 1u64 << 40;
    for (name, make) in exchanges {
        let one = Deployment {
            nodes: vec![(&sled_node, make(sled_node.addr, settings.connections)?)],
        };
        let two = Deployment {
            nodes: vec![
                (&first, make(first.addr, settings.connections)?),
                (&second, make(second.addr, settings.connections)?),
            ],
        };
        for deployment in [&one, &two] {
            for (_, target) in &deployment.nodes {
                let (status, reply) = load::one(target, (target.body)(0, 0)).await?;
                if !(target.check)(status, &reply) {
                    return Err(anyhow!(
                        "{name}: the node did not answer as expected: HTTP {status} {}",
                        String::from_utf8_lossy(&reply)
                    ));
                }
            }
        }
        let (mut sled_side, mut fleet_side) = (Measured::new(), Measured::new());
        for round in 0..settings.rounds {
            let order: [(&Deployment, &mut Measured); 2] = if round % 2 == 0 {
                [(&one, &mut sled_side), (&two, &mut fleet_side)]
            } else {
                [(&two, &mut fleet_side), (&one, &mut sled_side)]
            };
            for (deployment, side) in order {
                deployment.run(settings.connections, settings.warmup, seq).await;
                seq += 1 << 32;
                let cpu_before = deployment.cpu_seconds();
                let segment = deployment.run(settings.connections, settings.duration, seq).await;
                seq += 1 << 32;
                side.cpu_seconds += deployment.cpu_seconds() - cpu_before;
                side.segment.merge(&segment);
            }
        }
        cells.push(format!(
            "{name}: 2 nodes + PostgreSQL {} vs 1 node + sled {} ({:.2}×)",
            fleet_side.summary(),
            sled_side.summary(),
            fleet_side.segment.rate() / sled_side.segment.rate().max(1e-9)
        ));
        raw.insert(
            name.to_string(),
            json!({"two_nodes_postgres": fleet_side.json(), "one_node_sled": sled_side.json()}),
        );
        if fleet_side.segment.failed > 0 || sled_side.segment.failed > 0 {
            raw.insert(format!("{name}: failures"), json!(true));
        }
    }
    let failed = raw.keys().any(|k| k.ends_with("failures"));
    Ok(Row {
        id: 9,
        measure: "Fleet: two nodes + one PostgreSQL vs one node + sled, same load split over the nodes"
            .into(),
        node: cells.join("<br>"),
        comparison: "one node on sled (above, same run)".into(),
        ratio: "see cells".into(),
        target: "every guarantee holds; cost measured".into(),
        status: if settings.smoke {
            verdict(settings, true)
        } else if failed {
            "failed".into()
        } else {
            "measured".into()
        },
        raw: Value::Object(raw),
    })
}

/// Row 10: the replay check alone — `insert_new` of a fresh key with an
/// expiry, `connections` callers at once — on PostgreSQL and on sled.
pub async fn row10(settings: &Settings) -> Result<Row> {
    let postgres = Postgres::start();
    let database = postgres.create_database();
    let mut store = agora_node::config::Config::defaults().store;
    store.postgres_url = database;
    store.postgres_pool_size = settings.connections.max(1);
    store.postgres_timeout_ms = 5_000;
    let shared = Store::new(Arc::new(
        PostgresBackend::connect(&store, std::path::Path::new(""))
            .await
            .map_err(|e| anyhow!("connecting to the bench database: {e}"))?,
    ));
    let embedded = Store::temporary().map_err(|e| anyhow!("a temporary sled store: {e}"))?;
    let mut results = Vec::new();
    for (name, store) in [("postgres", shared), ("sled", embedded)] {
        // Warm the pool and the caches, then measure.
        replay_checks(&store, settings.connections, settings.warmup, 0).await?;
        let (checks, elapsed, mut latencies) = replay_checks(
            &store,
            settings.connections,
            settings.duration * settings.rounds as u32,
            1 << 40,
        )
        .await?;
        latencies.sort_unstable();
        let quantile = |q: f64| -> f64 {
            let index = ((latencies.len() as f64 - 1.0) * q).round() as usize;
            latencies.get(index).copied().unwrap_or(0) as f64 / 1000.0
        };
        results.push((
            name,
            checks as f64 / elapsed.as_secs_f64(),
            quantile(0.5),
            quantile(0.99),
        ));
    }
    let cell = |(name, rate, p50, p99): &(&str, f64, f64, f64)| {
        format!(
            "{name}: {} checks/s, p50 {p50:.3} ms, p99 {p99:.3} ms",
            fmt_rate(*rate)
        )
    };
    Ok(Row {
        id: 10,
        measure: format!(
            "Replay check alone (claim_once: atomic first claim with expiry), {} callers in process",
            settings.connections
        ),
        node: cell(&results[0]),
        comparison: cell(&results[1]),
        ratio: format!(
            "+{:.3} ms p50 per request",
            results[0].2 - results[1].2
        ),
        target: "measured".into(),
        status: if settings.smoke {
            verdict(settings, true)
        } else {
            "measured".into()
        },
        raw: json!(results
            .iter()
            .map(|(name, rate, p50, p99)| json!({"backend": name, "per_s": rate, "p50_ms": p50, "p99_ms": p99}))
            .collect::<Vec<_>>()),
    })
}

/// `callers` tasks inserting fresh replay keys for `duration`: (count, elapsed, latencies in µs).
async fn replay_checks(
    store: &Store,
    callers: usize,
    duration: Duration,
    base: u64,
) -> Result<(u64, Duration, Vec<u64>)> {
    let started = Instant::now();
    let end = started + duration;
    let tasks: Vec<_> = (0..callers.max(1))
        .map(|caller| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = base + ((caller as u64) << 32);
                while Instant::now() < end {
                    let key = format!("did:key:bench{caller}\0{n}");
                    n += 1;
                    let sent = Instant::now();
                    let fresh = store.claim_once(key.as_bytes(), now_ms() + 60_000).await?;
                    if !fresh {
                        return Err(anyhow!("a fresh key was refused as a replay"));
                    }
                    latencies.push(sent.elapsed().as_micros() as u64);
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok((all.len() as u64, started.elapsed(), all))
}
