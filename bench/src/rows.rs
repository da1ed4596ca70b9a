//! The driver of issue 9's table: [`run_all`] runs the rows asked for, in
//! order, and collects their lines into the report `main.rs` prints; rows 1–8
//! are defined here, the later ones in their topic modules (`fleet`, `a2a`,
//! `mcp`, `crowd`). Every row measures the node and its comparison in the
//! same run, alternating segment by segment ([`crate::rounds`]) so that
//! whatever else the machine is doing weighs on both sides alike. What rows
//! share lives below them, in `report`, `rounds` and `fixture`, which import
//! no row: the driver imports the rows, never the other way round.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agora_bench::floor;
use agora_node::crypto::envelope as signed;
use agora_node::crypto::identity::did_key;
use agora_node::crypto::uagents::{AgentIdentity, Envelope as UagentsEnvelope};
use anyhow::{Result, anyhow};
use base64::Engine as _;
use bytes::Bytes;
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use crate::fixture::{
    VERSIONED_DOCUMENT, agora_success, agora_target, bench_hai_node, converter_document, converter_node,
    converter_query, envelope_keys, one_client_stands_for_many, sha1_hex, temp_dir, versioned_build,
};
use crate::hai;
use crate::load::{self, Segment, Target};
use crate::procs::{self, NodeSpec, Server};
use crate::report::{Report, Row, fmt_rate, verdict};
use crate::rounds::{Shape, Side, alternate, segment};
use crate::settings::Settings;

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

pub async fn run_all(settings: &Settings, wanted: &[u8]) -> Result<Report> {
    let started = Instant::now();
    let load_before = loadavg();
    let mut rows = Vec::new();
    for &id in wanted {
        eprintln!("== row {id} ({:.0} s in)", started.elapsed().as_secs_f64());
        let outcome = match id {
            1 => row1(settings).await,
            2 => row2(settings).await,
            3 => row3(settings).await,
            4 => row4(settings).await,
            5 => row5(settings).await,
            6 => row6(settings).await,
            7 => row7(settings).await,
            8 => row8(settings).await,
            9 => crate::fleet::row9(settings).await,
            10 => crate::fleet::row10(settings).await,
            11 => crate::a2a::row11(settings).await,
            12 => crate::mcp::row12(settings).await,
            13 => crate::crowd::row13(settings).await,
            14 => crate::crowd::row14(settings).await,
            15 => crate::fleet_publish::row15(settings).await,
            16 => crate::wasmtime_serve::row16(settings).await,
            17 => crate::tls::row17(settings).await,
            other => Err(anyhow!("there is no row {other}")),
        };
        let row = outcome.unwrap_or_else(|error| Row {
            id,
            measure: format!("row {id}"),
            node: "—".into(),
            comparison: "—".into(),
            ratio: "—".into(),
            target: "—".into(),
            status: "failed".into(),
            raw: json!({"error": format!("{error:#}")}),
        });
        eprintln!(
            "   {} | {} | {} | {}",
            row.node, row.comparison, row.ratio, row.status
        );
        if row.status == "failed" {
            eprintln!("   {}", row.raw);
        }
        rows.push(row);
    }
    let meta = json!({
        "smoke": settings.smoke,
        "segment_seconds": settings.duration.as_secs_f64(),
        "warmup_seconds": settings.warmup.as_secs_f64(),
        "rounds": settings.rounds,
        "connections": settings.connections,
        "node_binary": settings.node_bin.display().to_string(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "total_seconds": started.elapsed().as_secs_f64(),
        "git_commit": Command::new("git").args(["rev-parse", "HEAD"]).current_dir(procs::repo_root())
            .output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    Ok(Report { rows, meta })
}

// ---------------------------------------------------------------- row 1

async fn row1(settings: &Settings) -> Result<Row> {
    let data = temp_dir()?;
    let (node, request, reply) = converter_node(settings, data.path(), &[]).await?;
    let body_file = data.path().join("ceiling-reply.json");
    std::fs::write(&body_file, &reply)?;
    let port = procs::free_port();
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["ceiling", "--port", &port.to_string(), "--body-file"])
        .arg(&body_file);
    let (ceiling, _) = procs::spawn("ceiling", command, port, "listening on", Duration::from_secs(30))?;
    let expected = reply.clone();
    let node_target = agora_target(&node, "/agora", request.clone(), agora_success());
    let ceiling_target = agora_target(
        &ceiling,
        "/agora",
        request,
        Arc::new(move |status, body| status == 200 && body == expected.as_ref()),
    );
    let (peak_node, peak_ceiling) = alternate(
        settings,
        settings.connections,
        (&node_target, &node),
        (&ceiling_target, &ceiling),
        Shape::Closed,
    )
    .await;
    // Latency at a fixed load: half the node's peak rate, offered to both.
    let half = peak_node.rate() / 2.0;
    let (fixed_node, fixed_ceiling) = alternate(
        settings,
        settings.connections,
        (&node_target, &node),
        (&ceiling_target, &ceiling),
        Shape::Rate(half),
    )
    .await;
    let ratio = peak_node.rate() / peak_ceiling.rate().max(1e-9);
    let cpu_ratio = peak_node.per_cpu() / peak_ceiling.per_cpu().max(1e-9);
    let p99 = fixed_node.total.p(0.99);
    // Issue 42: judged against what the node would do with its own code at zero.
    let profile = crate::accounting::profile(settings, &node_target, &node, &[]).await;
    let judged = crate::accounting::judge(
        settings,
        &profile,
        cpu_ratio,
        peak_ceiling.per_cpu(),
        peak_node.total.failed,
    );
    Ok(Row {
        id: 1,
        measure: "Agora single-round request, Wasm plugin (unit-converter) vs bare axum handler (ceiling)"
            .into(),
        node: format!(
            "{} req/s ({} req/CPU-s); at {} req/s: p50 {:.2} ms, p99 {:.2} ms{}",
            fmt_rate(peak_node.rate()),
            fmt_rate(peak_node.per_cpu()),
            fmt_rate(half),
            fixed_node.total.p(0.5),
            p99,
            judged.node
        ),
        comparison: format!(
            "{} req/s ({} req/CPU-s); at {} req/s: p50 {:.2} ms, p99 {:.2} ms",
            fmt_rate(peak_ceiling.rate()),
            fmt_rate(peak_ceiling.per_cpu()),
            fmt_rate(half),
            fixed_ceiling.total.p(0.5),
            fixed_ceiling.total.p(0.99)
        ),
        ratio: format!(
            "{:.0} % of ceiling throughput ({:.0} % per CPU-s){}",
            ratio * 100.0,
            cpu_ratio * 100.0,
            judged.ratio
        ),
        target: "≥ 90 % of its stack bound (per CPU-s)".into(),
        status: judged.status,
        raw: json!({
            "peak": {"node": peak_node.json(), "ceiling": peak_ceiling.json()},
            "half_peak_rate": half,
            "fixed_rate": {"node": fixed_node.json(), "ceiling": fixed_ceiling.json()},
            "throughput_ratio": ratio, "per_cpu_ratio": cpu_ratio,
            "node_rss_mb": node.rss_mb(), "ceiling_rss_mb": ceiling.rss_mb(),
            "accounting": judged.raw,
        }),
    })
}

// ---------------------------------------------------------------- row 2

async fn row2(settings: &Settings) -> Result<Row> {
    let python = procs::python_venv("agora-protocol", &["agora-protocol==0.2.0"])?;
    let data = temp_dir()?;
    let (node, request, _) = converter_node(settings, data.path(), &[]).await?;
    let storage = data.path().join("reference");
    std::fs::create_dir_all(&storage)?;
    let port = procs::free_port();
    let mut command = Command::new(python);
    command
        .arg(procs::repo_root().join("bench/peers/agora_reference.py"))
        .arg(port.to_string())
        .arg(&storage)
        .current_dir(&storage)
        .env("PYTHONPATH", procs::repo_root().join("tests/interop/agora"))
        .env("PYTHONWARNINGS", "ignore");
    let (reference, _) = procs::spawn(
        "agora-protocol ReceiverServer",
        command,
        port,
        "",
        Duration::from_secs(90),
    )?;
    // agora-protocol 0.2.0 reads only front-matter documents and base64 hashes, and
    // needs the sources with every request (it looks the hash up first).
    let document = format!(
        "---\nname: Unit conversion\ndescription: converts a value between units\nmultiround: false\n---\n\n{}",
        converter_document()?
    );
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha1::digest(document.as_bytes()));
    let source = format!(
        "data:text/plain;charset=utf-8;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(document.as_bytes())
    );
    let reference_request = Bytes::from(
        json!({"protocolHash": hash, "protocolSources": [source], "body": converter_query().to_string()})
            .to_string(),
    );
    let reference_target = agora_target(
        &reference,
        "/",
        reference_request.clone(),
        Arc::new(|status, body| {
            status == 200
                && serde_json::from_slice::<Value>(body).is_ok_and(|v| {
                    v["status"] == "success" && v["body"].as_str().is_some_and(|b| b.contains("5000"))
                })
        }),
    );
    let (status, reply) = load::one(&reference_target, reference_request).await?;
    if !(reference_target.check)(status, &reply) {
        return Err(anyhow!(
            "the reference server did not convert: HTTP {status} {}",
            String::from_utf8_lossy(&reply)
        ));
    }
    let node_target = agora_target(&node, "/agora", request, agora_success());
    let (a, b) = alternate(
        settings,
        settings.connections,
        (&node_target, &node),
        (&reference_target, &reference),
        Shape::Closed,
    )
    .await;
    let ratio = a.rate() / b.rate().max(1e-9);
    let cpu_ratio = a.per_cpu() / b.per_cpu().max(1e-9);
    Ok(Row {
        id: 2,
        measure: "The same exchange vs agora-protocol 0.2.0 ReceiverServer (Flask, scripted model)".into(),
        node: format!(
            "{} req/s, p50 {:.2} ms, p99 {:.2} ms",
            fmt_rate(a.rate()),
            a.total.p(0.5),
            a.total.p(0.99)
        ),
        comparison: format!(
            "{} req/s, p50 {:.2} ms, p99 {:.2} ms",
            fmt_rate(b.rate()),
            b.total.p(0.5),
            b.total.p(0.99)
        ),
        ratio: format!("{ratio:.1}× ({cpu_ratio:.1}× per CPU-s)"),
        // Issue 21 set 40× (issue 9 had asked 50×), counted both ways.
        target: "≥ 40×, per second and per CPU-s".into(),
        status: verdict(
            settings,
            ratio >= 40.0 && cpu_ratio >= 40.0 && a.total.failed == 0,
        ),
        raw: json!({"node": a.json(), "reference": b.json(), "throughput_ratio": ratio, "per_cpu_ratio": cpu_ratio}),
    })
}

// ---------------------------------------------------------------- row 3
/// This thread's own CPU seconds (other driver threads do not count).
fn thread_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let rest = stat.rfind(')').map(|i| &stat[i + 2..]).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// A cryptographic floor (`operation`, once per count) on one thread for
/// `seconds`: (per wall second, per CPU second).
fn crypto_floor<T>(operation: impl Fn() -> T, seconds: f64) -> (f64, f64) {
    let started = Instant::now();
    let cpu_before = thread_cpu_seconds();
    let mut count = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        for _ in 0..64 {
            std::hint::black_box(operation());
        }
        count += 64;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu_used = (thread_cpu_seconds() - cpu_before).max(1e-9);
    (count as f64 / wall, count as f64 / cpu_used)
}

/// Row 3's floor (`floor::verify_and_sign`) in the node's function names: the
/// strict parse, JCS signing input, Ed25519 and SHA-512 of a verify and a sign.
const ENVELOPE_FLOOR: &[&str] = &[
    "ed25519",
    "curve25519",
    "sha2::sha512",
    "agora_node::crypto::jcs::",
    "agora_node::crypto::envelope::verify_bytes",
    "agora_node::crypto::envelope::verify_value",
    "agora_node::crypto::envelope::signing_input",
    "agora_node::crypto::envelope::sign",
    "agora_node::crypto::envelope::decode_signature",
    "agora_node::crypto::envelope::SigningView",
    "agora_node::crypto::envelope::SenderView",
    "agora_node::crypto::identity::parse_sender_id",
    "agora_node::crypto::identity::parse_did_key_value",
    "agora_node::crypto::identity::key_from_bytes",
];

async fn row3(settings: &Settings) -> Result<Row> {
    let data = temp_dir()?;
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data.path(),
        plugins: &["envelope-services"],
        env: &[("AGORA_ENVELOPES__RATE_LIMIT_PER_MINUTE", "1000000000".into())],
    })?;
    let keys = Arc::new(envelope_keys(settings.connections));
    let probe_request = floor::sum_request(&keys[0]);
    let request_bytes = Bytes::from(probe_request.to_string());
    let check: load::CheckFn = Arc::new(|status, body| {
        status == 200 && serde_json::from_slice::<Value>(body).is_ok_and(|v| v["type"] == "RESULT")
    });
    let make = keys.clone();
    let target = Target {
        addr: node.addr,
        transport: Default::default(),
        path: "/envelopes".into(),
        headers: Vec::new(),
        // Every request is a fresh envelope (new id, current time) signed by its connection's agent.
        body: Arc::new(move |conn, _| Bytes::from(floor::sum_request(&make[conn % make.len()]).to_string())),
        check: check.clone(),
    };
    let (status, reply) = load::one(&target, request_bytes.clone()).await?;
    if !check(status, &reply) {
        return Err(anyhow!(
            "no RESULT: HTTP {status} {}",
            String::from_utf8_lossy(&reply)
        ));
    }
    let reply_value: Value = serde_json::from_slice(&reply)?;
    signed::verify_bytes(&reply).map_err(|e| anyhow!("the node's RESULT does not verify: {e}"))?;
    // The node's reply, to be re-signed by the floor loop with a key of ours.
    let floor_key = SigningKey::from_bytes(&[9u8; 32]);
    let mut reply_template = reply_value.clone();
    reply_template["sender"]["signature"] = json!("");
    reply_template["sender"]["id"] = json!(did_key(&floor_key.verifying_key()));

    let mut node_side = Side::new();
    let mut floor_wall = Vec::new();
    let mut floor_cpu = Vec::new();
    for _ in 0..settings.rounds {
        segment(
            settings,
            settings.connections,
            &target,
            &node,
            Shape::Closed,
            &mut node_side,
        )
        .await;
        let request = request_bytes.clone();
        let template = reply_template.clone();
        let key = floor_key.clone();
        let seconds = settings.duration.as_secs_f64();
        let floor = move || floor::verify_and_sign(&request, &template, &key);
        let (wall, cpu) = tokio::task::spawn_blocking(move || crypto_floor(floor, seconds)).await?;
        floor_wall.push(wall);
        floor_cpu.push(cpu);
    }
    let floor_per_core = floor_cpu.iter().sum::<f64>() / floor_cpu.len() as f64;
    let ratio = node_side.per_cpu() / floor_per_core.max(1e-9);
    let profile = crate::accounting::profile(settings, &target, &node, ENVELOPE_FLOOR).await;
    let judged = crate::accounting::judge(settings, &profile, ratio, floor_per_core, node_side.total.failed);
    Ok(Row {
        id: 3,
        measure:
            "Signed envelope REQUEST → RESULT over HTTP (agora:sum:v1) vs Ed25519 verify + sign + JCS (floor)"
                .into(),
        node: format!(
            "{} connections: {} req/s on {:.2} cores = {} req/CPU-s; p50 {:.2} ms, p99 {:.2} ms; {} failed{}",
            settings.connections,
            fmt_rate(node_side.rate()),
            node_side.cpu_seconds / node_side.total.elapsed.as_secs_f64().max(1e-9),
            fmt_rate(node_side.per_cpu()),
            node_side.total.p(0.5),
            node_side.total.p(0.99),
            node_side.total.failed,
            judged.node
        ),
        comparison: format!("{} verify+sign/CPU-s (one core)", fmt_rate(floor_per_core)),
        ratio: format!("{:.0} % of the floor per core{}", ratio * 100.0, judged.ratio),
        target: "≥ 90 % of its stack bound (per CPU-s)".into(),
        status: judged.status,
        raw: json!({
            "node": node_side.json(),
            "floor_per_cpu_second": floor_cpu, "floor_per_wall_second": floor_wall,
            "floor_per_core": floor_per_core, "per_core_ratio": ratio,
            "request_bytes": request_bytes.len(), "reply_bytes": reply.len(),
            "accounting": judged.raw,
            "node_log_tail": node.log_tail(),
        }),
    })
}

// ---------------------------------------------------------------- row 4

const MESSAGE_DIGEST: &str = "model:3968d004abc47bcb38618e96eff911f3d2ee2e335856e39a9aadc90a1e3700f8";

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn uagents_target(server: &Server, to: String, senders: Arc<Vec<AgentIdentity>>) -> Target {
    Target {
        addr: server.addr,
        transport: Default::default(),
        path: "/submit".into(),
        headers: vec![("x-uagents-connection".into(), "sync".into())],
        body: Arc::new(move |conn, seq| {
            let from = &senders[conn % senders.len()];
            let mut envelope = UagentsEnvelope {
                version: 1,
                sender: from.address().to_string(),
                target: to.clone(),
                session: uuid::Uuid::new_v4().to_string(),
                schema_digest: MESSAGE_DIGEST.to_string(),
                protocol_digest: None,
                payload: None,
                expires: Some(now_secs() + 60),
                nonce: None,
                signature: None,
            };
            envelope.encode_payload(&json!({"text": format!("bench {seq}")}).to_string());
            envelope.sign(from);
            Bytes::from(envelope.to_json())
        }),
        check: Arc::new(|status, body| {
            status == 200 && serde_json::from_slice::<Value>(body).is_ok_and(|v| v["payload"].is_string())
        }),
    }
}

fn echo_reply_text(body: &[u8]) -> Option<String> {
    let envelope = UagentsEnvelope::from_value(serde_json::from_slice(body).ok()?).ok()?;
    let payload: Value = serde_json::from_str(&envelope.decode_payload().ok()?).ok()?;
    payload["text"].as_str().map(String::from)
}

/// Row 4's floor (`floor::uagents_verify_and_sign`) in the node's function
/// names: the envelope's reading, its SHA-256 digest, libsecp256k1 (its C
/// symbols are `rustsecp256k1_v…`) and the address decoding of a verify and a sign.
const UAGENTS_FLOOR: &[&str] = &["secp256k1", "sha2::", "bech32::", "agora_node::crypto::uagents::"];

async fn row4(settings: &Settings) -> Result<Row> {
    let python = procs::python_venv("uagents", &["uagents==0.26.1"])?;
    let data = temp_dir()?;
    let node_seed = "agora-bench-node-seed-v1";
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data.path(),
        plugins: &["uagents-echo"],
        env: &[("AGORA_UAGENTS__SEED", node_seed.into())],
    })?;
    let agent_seed = "agora-bench-uagent-seed-v1";
    let port = procs::free_port();
    let mut command = Command::new(python);
    command
        .arg(procs::repo_root().join("tests/interop/uagents/echo_agent.py"))
        .arg(agent_seed)
        .arg(port.to_string())
        .arg("quiet")
        .current_dir(data.path())
        .env("PYTHONPATH", procs::repo_root().join("tests/interop/uagents"))
        .env("PYTHONWARNINGS", "ignore");
    let (agent, _) = procs::spawn("uAgent echo", command, port, "", Duration::from_secs(90))?;
    // One sender identity per connection: a uAgent matches a sync reply to its query by sender.
    let senders: Arc<Vec<AgentIdentity>> = Arc::new(
        (0..settings.connections)
            .map(|i| AgentIdentity::from_seed(&format!("agora-bench-sender-{i}")))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow!("{e}"))?,
    );
    let node_address = AgentIdentity::from_seed(node_seed)
        .map_err(|e| anyhow!("{e}"))?
        .address()
        .to_string();
    let agent_address = AgentIdentity::from_seed(agent_seed)
        .map_err(|e| anyhow!("{e}"))?
        .address()
        .to_string();
    let node_target = uagents_target(&node, node_address, senders.clone());
    let agent_target = uagents_target(&agent, agent_address, senders);
    let mut node_reply = Vec::new();
    for (name, target) in [("node", &node_target), ("uAgent", &agent_target)] {
        let (status, reply) = load::one(target, (target.body)(0, 0)).await?;
        let text = echo_reply_text(&reply);
        if status != 200 || text.as_deref() != Some("echo: bench 0") {
            return Err(anyhow!(
                "the {name} did not echo: HTTP {status} {}",
                String::from_utf8_lossy(&reply)
            ));
        }
        if node_reply.is_empty() {
            node_reply = reply.to_vec();
        }
    }
    let (a, b) = alternate(
        settings,
        settings.connections,
        (&node_target, &node),
        (&agent_target, &agent),
        Shape::Closed,
    )
    .await;
    let ratio = a.rate() / b.rate().max(1e-9);
    let cpu_ratio = a.per_cpu() / b.per_cpu().max(1e-9);
    let profile = crate::accounting::profile(settings, &node_target, &node, UAGENTS_FLOOR).await;

    // Its own floor, measured like row 3's: verify one of the driver's requests
    // and sign the node's reply (re-signed by an identity of ours), on one thread.
    let floor_identity = AgentIdentity::from_seed(node_seed).map_err(|e| anyhow!("{e}"))?;
    let reply_template = UagentsEnvelope::from_value(serde_json::from_slice(&node_reply)?)
        .map_err(|e| anyhow!("the node's reply is not an envelope: {e}"))?;
    let request = (node_target.body)(0, 0);
    let mut floor_cpu = Vec::new();
    for _ in 0..settings.rounds {
        let (request, template, identity) = (request.clone(), reply_template.clone(), floor_identity.clone());
        let floor = move || floor::uagents_verify_and_sign(&request, &template, &identity);
        let seconds = settings.duration.as_secs_f64();
        let (_, cpu) = tokio::task::spawn_blocking(move || crypto_floor(floor, seconds)).await?;
        floor_cpu.push(cpu);
    }
    let floor_per_core = floor_cpu.iter().sum::<f64>() / floor_cpu.len() as f64;
    let floor_ratio = a.per_cpu() / floor_per_core.max(1e-9);
    let judged = crate::accounting::judge(settings, &profile, floor_ratio, floor_per_core, a.total.failed);
    Ok(Row {
        id: 4,
        measure: "uAgents /submit sync echo (uagents-echo plugin) vs a real uAgent (uagents 0.26.1)".into(),
        node: format!(
            "{} connections: {} req/s ({} req/CPU-s), p50 {:.2} ms, p99 {:.2} ms{}",
            settings.connections,
            fmt_rate(a.rate()),
            fmt_rate(a.per_cpu()),
            a.total.p(0.5),
            a.total.p(0.99),
            judged.node
        ),
        comparison: format!(
            "{} connections: {} req/s ({} req/CPU-s), p50 {:.2} ms, p99 {:.2} ms",
            settings.connections,
            fmt_rate(b.rate()),
            fmt_rate(b.per_cpu()),
            b.total.p(0.5),
            b.total.p(0.99),
        ),
        ratio: format!(
            "{ratio:.1}× ({cpu_ratio:.1}× per CPU-s); {:.0} % of its floor per core ({} verify+sign/CPU-s){}",
            floor_ratio * 100.0,
            fmt_rate(floor_per_core),
            judged.ratio
        ),
        // Issue 42: the ratio to a real uAgent stays a measured comparison.
        target: "≥ 90 % of its stack bound; ratio to a real uAgent measured".into(),
        status: judged.status,
        raw: json!({
            "node": a.json(), "uagent": b.json(), "throughput_ratio": ratio, "per_cpu_ratio": cpu_ratio,
            "floor_per_cpu_second": floor_cpu, "floor_per_core": floor_per_core, "floor_ratio": floor_ratio,
            "accounting": judged.raw,
        }),
    })
}

// ---------------------------------------------------------------- row 5

/// `elapsed_ms=N` of the runtime's "plugin loaded" log line: compile + validate + swap.
fn loaded_elapsed_ms(line: &str) -> Option<f64> {
    if !line.contains("plugin loaded") {
        return None;
    }
    let rest = &line[line.find("elapsed_ms=")? + "elapsed_ms=".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

async fn row5(settings: &Settings) -> Result<Row> {
    let swaps: u32 = if settings.smoke { 2 } else { 20 };
    let load_rate = if settings.smoke { 100.0 } else { 400.0 };
    let original = std::fs::read(procs::plugin_wasm("fixture-versioned")?)?;
    let data = temp_dir()?;
    let plugins_dir = data.path().join("plugins");
    procs::install_bytes(&plugins_dir, "versioned", &versioned_build(&original, 0)?)?;
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data.path(),
        plugins: &[],
        // The runtime's "plugin loaded … elapsed_ms=" lines: how long each reload's load took.
        env: &[("RUST_LOG", "warn,agora_node::runtime=info".into())],
    })?;
    let request = Bytes::from(
        json!({"protocolHash": sha1_hex(VERSIONED_DOCUMENT.as_bytes()), "body": "which version?"})
            .to_string(),
    );
    let target = agora_target(&node, "/agora", request.clone(), agora_success());
    let (status, reply) = load::one(&target, request.clone()).await?;
    if !(target.check)(status, &reply) {
        return Err(anyhow!(
            "the versioned fixture does not answer: {}",
            String::from_utf8_lossy(&reply)
        ));
    }
    // Background load during the swaps, at a fixed rate, counting failures.
    let stop = Arc::new(AtomicBool::new(false));
    let load_target = target.clone();
    let connections = 4;
    let load_task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut total = Segment::empty();
            while !stop.load(Ordering::Relaxed) {
                let part = load::fixed_rate(
                    &load_target,
                    connections,
                    load_rate,
                    Duration::ZERO,
                    Duration::from_millis(250),
                    0,
                )
                .await;
                total.merge(&part);
            }
            total
        })
    };
    let mut poller = load::Client::new(target.clone());
    let mut times_ms = Vec::new();
    let mut load_ms = Vec::new();
    for version in 1..=swaps {
        let bytes = versioned_build(&original, version)?;
        let expected = format!("AGORA-VERSION-MARKER-{version:011}");
        let log_before = node.log_len();
        procs::install_bytes(&plugins_dir, "versioned", &bytes)?;
        let replaced = Instant::now();
        loop {
            if let Ok((200, body)) = poller.send(request.clone()).await
                && body.windows(expected.len()).any(|w| w == expected.as_bytes())
            {
                break;
            }
            if replaced.elapsed() > Duration::from_secs(30) {
                return Err(anyhow!("version {version} never served:\n{}", node.log_tail()));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times_ms.push(replaced.elapsed().as_secs_f64() * 1000.0);
        // The node logs "plugin loaded" just after the swap the poller saw: wait for it.
        let logged = Instant::now();
        loop {
            let line = node
                .log_since(log_before)
                .iter()
                .find_map(|line| loaded_elapsed_ms(line));
            if let Some(ms) = line {
                load_ms.push(ms);
                break;
            }
            if logged.elapsed() > Duration::from_secs(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Let the load see the new version for a moment before the next swap.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let during = load_task.await?;
    let mut sorted = times_ms.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[sorted.len() / 2];
    let max = *sorted.last().unwrap_or(&0.0);
    let min = sorted.first().copied().unwrap_or(0.0);
    let debounce_ms = agora_node::Config::defaults().plugins.reload_debounce_ms as f64;
    let mut sorted_load = load_ms.clone();
    sorted_load.sort_by(|a, b| a.total_cmp(b));
    let load_median = sorted_load.get(sorted_load.len() / 2).copied();
    let met = median <= 250.0 && during.failed == 0;
    Ok(Row {
        id: 5,
        measure: format!(
            "Hot reload: plugin file replaced → first reply from the new version ({swaps} swaps)"
        ),
        node: format!(
            "median {median:.0} ms, min {min:.0} ms, max {max:.0} ms; {} failed of {} requests at {load_rate:.0} req/s",
            during.failed,
            during.ok + during.failed
        ),
        comparison: format!(
            "of which: the reload debounce {debounce_ms:.0} ms (plugins.reload_debounce_ms); compile + load (node log, median) {}",
            load_median.map_or("not logged".into(), |ms| format!("{ms:.0} ms"))
        ),
        ratio: "—".into(),
        target: "median ≤ 250 ms, 0 failed".into(),
        status: verdict(settings, met),
        raw: json!({
            "swap_ms": times_ms, "median_ms": median, "max_ms": max, "min_ms": min,
            "load": {"ok": during.ok, "failed": during.failed, "first_failure": during.first_failure,
                     "rate": load_rate, "connections": connections,
                     "p50_ms": during.p(0.5), "p99_ms": during.p(0.99), "max_ms": during.p(1.0)},
            "reload_debounce_ms": debounce_ms,
            "load_ms": load_ms, "load_median_ms": load_median,
        }),
    })
}

// ---------------------------------------------------------------- row 6

/// Row 6 (a): time to first chunk with the `bench-hai` assistant, which streams
/// its chunk as its first act, one message at a time; the same plugin's call
/// timed in process (as row 8) is subtracted to give the host's overhead.
/// (b): the node's RSS with 1,000 and 10,000 idle sessions connected, each
/// opened as the browser client opens one (`/ws?session_id=…`), answering pings.
async fn row6(settings: &Settings) -> Result<Row> {
    let (few, many) = if settings.smoke { (20, 50) } else { (1_000, 10_000) };
    let (warmup, samples) = if settings.smoke { (10, 50) } else { (200, 2_000) };
    let fd_limit = hai::raise_fd_limit();
    if fd_limit < many as u64 + 1_024 {
        return Err(anyhow!(
            "{many} sessions need more open files than the limit of {fd_limit} (raise `ulimit -Hn`)"
        ));
    }
    let expected = "ok";

    // (a) Time to first chunk, and the plugin's own call time, in two alternating halves.
    let data = temp_dir()?;
    let node = bench_hai_node(settings, data.path())?;
    let plugin = agora_bench::plugin_call::Bench::load(
        &agora_bench::plugin_call::bench_plugin_wasm("bench-hai")?,
        "bench-hai",
    )
    .await?;
    let mut first = hai::first_chunk(node.addr, warmup, samples / 2, expected).await?;
    let plugin_time = plugin.measure_hai(samples).await?;
    let second = hai::first_chunk(node.addr, warmup, samples - samples / 2, expected).await?;
    first.hist.add(&second.hist)?;
    first.answers += second.answers;
    let cpu_first_chunk = node.cpu_seconds();
    drop(node);
    let chunk_ms = |q: f64| first.hist.value_at_quantile(q) as f64 / 1000.0;
    let (p50, p99) = (chunk_ms(0.5), chunk_ms(0.99));
    let overhead_p50 = p50 - plugin_time.p50_us / 1000.0;
    let overhead_p99 = p99 - plugin_time.p99_us / 1000.0;

    // (b) Idle sessions on a fresh node.
    let data = temp_dir()?;
    let (node, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: data.path(),
        plugins: &["bench-hai"],
        env: &one_client_stands_for_many(&[]),
    })?;
    let settle = || tokio::time::sleep(Duration::from_millis(if settings.smoke { 200 } else { 1_000 }));
    settle().await;
    let base_mb = node.rss_mb();
    let mut idle = hai::IdleSessions::new();
    let opening = Instant::now();
    idle.grow_to(node.addr, few, 64).await?;
    settle().await;
    let few_mb = node.rss_mb();
    idle.grow_to(node.addr, many, 64).await?;
    let open_seconds = opening.elapsed().as_secs_f64();
    settle().await;
    let many_mb = node.rss_mb();
    let (errors, closed) = (
        idle.errors.load(Ordering::Relaxed),
        idle.closed.load(Ordering::Relaxed),
    );
    let held = idle.len();
    drop(idle);
    drop(node);
    if errors > 0 || closed > 0 {
        return Err(anyhow!(
            "of {held} idle sessions, {errors} got an error frame and {closed} were closed by the node"
        ));
    }
    let per_session_kb = (many_mb - base_mb) * 1024.0 / many as f64;
    let met = overhead_p50 <= 2.0 && many_mb < 200.0;
    Ok(Row {
        id: 6,
        measure: "HAI: time to first chunk (host overhead); RSS with 1,000 / 10,000 idle sessions".into(),
        node: format!(
            "first chunk p50 {p50:.2} ms, p99 {p99:.2} ms ({} answers, one at a time); RSS {base_mb:.0} MB idle, \
             {few_mb:.0} MB with {few} sessions, {many_mb:.0} MB with {many} ({per_session_kb:.1} KiB per session)",
            first.answers
        ),
        comparison: format!(
            "the plugin's call alone (in process): p50 {:.2} ms, p99 {:.2} ms",
            plugin_time.p50_us / 1000.0,
            plugin_time.p99_us / 1000.0
        ),
        ratio: format!("host overhead p50 {overhead_p50:.2} ms (p99 {overhead_p99:.2} ms)"),
        target: "first chunk ≤ 2 ms host overhead; 10,000 idle < 200 MB".into(),
        status: verdict(settings, met),
        raw: json!({
            "first_chunk": {"answers": first.answers, "p50_ms": p50, "p99_ms": p99,
                            "max_ms": chunk_ms(1.0), "node_cpu_seconds": cpu_first_chunk},
            "plugin_call": plugin_time.json(),
            "host_overhead_ms": {"p50": overhead_p50, "p99": overhead_p99},
            "idle_sessions": {"counts": [few, many], "rss_mb": {"base": base_mb, "few": few_mb, "many": many_mb},
                              "per_session_kib": per_session_kb, "open_seconds": open_seconds,
                              "fd_limit": fd_limit},
        }),
    })
}

// ---------------------------------------------------------------- row 7

/// Package names of the bundled example plugins (every crate under plugins/).
fn example_plugins() -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(procs::repo_root().join("plugins"))? {
        let manifest = entry?.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        if let Some(name) = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \"").and_then(|r| r.strip_suffix('"')))
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

async fn row7(settings: &Settings) -> Result<Row> {
    let repeats = if settings.smoke { 1 } else { 5 };
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut ceiling = Vec::new();
    let examples = example_plugins()?;
    let examples: Vec<&str> = examples.iter().map(String::as_str).collect();
    let reply_dir = temp_dir()?;
    let body_file = reply_dir.path().join("reply.json");
    std::fs::write(&body_file, b"{}")?;
    for _ in 0..repeats {
        // Cold: a new data folder, so no compile cache (and a fresh store and key).
        let data = temp_dir()?;
        let spec = NodeSpec {
            binary: &settings.node_bin,
            data_dir: data.path(),
            plugins: &examples,
            env: &[],
        };
        let (node, took) = procs::start_node(&spec)?;
        drop(node);
        cold.push(took.as_secs_f64() * 1000.0);
        // Warm: the same folder again, its compile cache filled by the cold start.
        let (node, took) = procs::start_node(&spec)?;
        drop(node);
        warm.push(took.as_secs_f64() * 1000.0);
        // The floor: the bare axum process starting on the same machine.
        let port = procs::free_port();
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["ceiling", "--port", &port.to_string(), "--body-file"])
            .arg(&body_file);
        let (server, took) = procs::spawn("ceiling", command, port, "listening on", Duration::from_secs(30))?;
        drop(server);
        ceiling.push(took.as_secs_f64() * 1000.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (cold_ms, warm_ms, ceiling_ms) = (
        median(&mut cold.clone()),
        median(&mut warm.clone()),
        median(&mut ceiling.clone()),
    );
    let examples_json = json!(examples);
    Ok(Row {
        id: 7,
        measure: format!(
            "Start-up to ready (every plugin loaded), all {} example plugins",
            examples.len()
        ),
        node: format!("cold (no compile cache) {cold_ms:.0} ms; warm {warm_ms:.0} ms (medians of {repeats})"),
        comparison: format!("bare axum process start {ceiling_ms:.0} ms"),
        ratio: format!("warm is {:.0} % of cold", warm_ms / cold_ms.max(1e-9) * 100.0),
        target: "warm ≤ 300 ms".into(),
        status: verdict(settings, warm_ms <= 300.0),
        raw: json!({"cold_ms": cold, "warm_ms": warm, "ceiling_start_ms": ceiling,
                    "cold_median_ms": cold_ms, "warm_median_ms": warm_ms, "plugins": examples_json}),
    })
}

// ---------------------------------------------------------------- row 8

async fn row8(settings: &Settings) -> Result<Row> {
    let bench = agora_bench::plugin_call::Bench::new().await?;
    let calls = if settings.smoke { 200 } else { 5000 };
    let empty = bench.measure(0, calls).await?;
    let big = bench.measure(64 * 1024, calls).await?;
    Ok(Row {
        id: 8,
        measure:
            "Plugin call overhead: instantiate + call + return, empty handler (Runtime::invoke, in process)"
                .into(),
        node: format!(
            "empty body: p50 {:.1} µs, p99 {:.1} µs",
            empty.p50_us, empty.p99_us
        ),
        comparison: format!("64 KiB body: p50 {:.1} µs, p99 {:.1} µs", big.p50_us, big.p99_us),
        ratio: format!("64 KiB costs +{:.1} µs", big.p50_us - empty.p50_us),
        target: "— (no target; informs rows 1–5)".into(),
        status: if settings.smoke {
            "smoke run (not a result)".into()
        } else {
            "measured".into()
        },
        raw: json!({"calls": calls, "empty": empty.json(), "body_64k": big.json()}),
    })
}
