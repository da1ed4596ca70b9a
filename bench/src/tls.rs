//! Row 17 (issue 42): what TLS costs users of the node on the open network.
//!
//! Row 1's exchange (the unit converter) against three servers: the node over
//! HTTPS (its own rustls listener, `[tls] cert_file/key_file`), the same node
//! over plain HTTP (a second process, since a listener serves one or the other)
//! and row 1's ceiling over HTTPS (bare axum behind tokio-rustls, see
//! `ceiling.rs`). Keep-alive connections measure the record layer; one new
//! connection per request measures the TCP and TLS handshakes too. Every
//! handshake is a full one: the client keeps no session to resume, as a client
//! that keeps nothing between requests would not, so the handshake cost is the
//! upper bound. The certificate is an ECDSA P-256 leaf for `localhost` and
//! 127.0.0.1 signed by the row's own CA, which only the load driver trusts.
//!
//! Four pairs of alternated segments: node HTTPS vs node plain, and node HTTPS
//! vs ceiling HTTPS, kept alive; node HTTPS vs ceiling HTTPS, and node HTTPS vs
//! node plain, with a new connection per request. No target: both per second
//! and per CPU-second are on record.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::json;
use tokio_rustls::TlsConnector;

use crate::fixture::{agora_success, agora_target, converter_node, temp_dir};
use crate::load;
use crate::procs::{self, NodeSpec, Server};
use crate::report::{Row, fmt_rate, untargeted_status};
use crate::rounds::{Shape, Side, alternate};
use crate::settings::Settings;

pub async fn row17(settings: &Settings) -> Result<Row> {
    let data = temp_dir()?;
    let (cert_file, key_file) = (data.path().join("cert.pem"), data.path().join("key.pem"));
    let connector = certificates(&cert_file, &key_file)?;
    // A connection the node closes is counted until the client's close reaches
    // it, so one client opening a connection per request can briefly hold more
    // than `connections` open: the per-address cap (128) must not refuse it.
    let caps = ("AGORA_HTTP__MAX_CONNECTIONS_PER_IP", "100000".to_string());
    let (plain, request, reply) =
        converter_node(settings, &data.path().join("plain"), std::slice::from_ref(&caps)).await?;
    let (https, _) = procs::start_node(&NodeSpec {
        binary: &settings.node_bin,
        data_dir: &data.path().join("https"),
        plugins: &["unit-converter"],
        env: &[
            caps,
            ("AGORA_TLS__CERT_FILE", cert_file.display().to_string()),
            ("AGORA_TLS__KEY_FILE", key_file.display().to_string()),
        ],
    })?;
    let ceiling = ceiling_over_tls(data.path(), &reply, &cert_file, &key_file)?;

    let node_tls =
        agora_target(&https, "/agora", request.clone(), agora_success()).over_tls(connector.clone());
    let (status, body) = load::one(&node_tls, request.clone())
        .await
        .context("the node over HTTPS")?;
    if !(node_tls.check)(status, &body) {
        bail!(
            "the node over HTTPS did not convert: HTTP {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    let node_plain = agora_target(&plain, "/agora", request.clone(), agora_success());
    let expected = reply.clone();
    let ceiling_tls = agora_target(
        &ceiling,
        "/agora",
        request,
        Arc::new(move |status, body| status == 200 && body == expected.as_ref()),
    )
    .over_tls(connector);

    let closed = Shape::Closed;
    let connections = settings.connections;
    let (kept_tls, kept_plain) = alternate(
        settings,
        connections,
        (&node_tls, &https),
        (&node_plain, &plain),
        closed,
    )
    .await;
    let (kept_tls_vs_ceiling, kept_ceiling) = alternate(
        settings,
        connections,
        (&node_tls, &https),
        (&ceiling_tls, &ceiling),
        closed,
    )
    .await;
    let per_request_node_tls = node_tls.clone().connection_per_request();
    let per_request_node_plain = node_plain.clone().connection_per_request();
    let per_request_ceiling = ceiling_tls.clone().connection_per_request();
    let (fresh_tls_vs_ceiling, fresh_ceiling) = alternate(
        settings,
        connections,
        (&per_request_node_tls, &https),
        (&per_request_ceiling, &ceiling),
        closed,
    )
    .await;
    let (fresh_tls, fresh_plain) = alternate(
        settings,
        connections,
        (&per_request_node_tls, &https),
        (&per_request_node_plain, &plain),
        closed,
    )
    .await;

    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    let kept_share = ratio(kept_tls.rate(), kept_plain.rate());
    let kept_cpu_share = ratio(kept_tls.per_cpu(), kept_plain.per_cpu());
    let fresh_share = ratio(fresh_tls.rate(), fresh_plain.rate());
    // The node's CPU per request with a handshake, less without: what one TLS handshake costs it.
    let handshake_cpu_ms =
        (1.0 / fresh_tls.per_cpu().max(1e-9) - 1.0 / fresh_plain.per_cpu().max(1e-9)) * 1000.0;
    let of_ceiling = ratio(kept_tls_vs_ceiling.rate(), kept_ceiling.rate());
    let of_ceiling_cpu = ratio(kept_tls_vs_ceiling.per_cpu(), kept_ceiling.per_cpu());
    let fresh_of_ceiling = ratio(fresh_tls_vs_ceiling.rate(), fresh_ceiling.rate());
    let sides = [
        &kept_tls,
        &kept_plain,
        &kept_tls_vs_ceiling,
        &kept_ceiling,
        &fresh_tls_vs_ceiling,
        &fresh_ceiling,
        &fresh_tls,
        &fresh_plain,
    ];
    let failed: u64 = sides.iter().map(|side| side.total.failed).sum();
    Ok(Row {
        id: 17,
        measure: "Row 1's exchange over HTTPS (rustls): node plain HTTP vs HTTPS vs bare axum+rustls, \
                  keep-alive and a new connection per request"
            .into(),
        node: format!(
            "HTTPS keep-alive {}; new connection per request {}",
            numbers(&kept_tls),
            numbers(&fresh_tls)
        ),
        comparison: format!(
            "node plain HTTP keep-alive {}, new connection per request {}; \
             bare axum+rustls keep-alive {}, new connection per request {}",
            numbers(&kept_plain),
            numbers(&fresh_plain),
            numbers(&kept_ceiling),
            numbers(&fresh_ceiling)
        ),
        ratio: format!(
            "TLS keeps {:.0} % of plain throughput ({:.0} % per CPU-s); new connection per request: \
             {} req/s, {:.0} % of plain (handshake cost {:.2} ms of node CPU); node HTTPS at {:.0} % \
             of bare axum+rustls ({:.0} % per CPU-s; {:.0} % with a new connection per request)",
            kept_share * 100.0,
            kept_cpu_share * 100.0,
            fmt_rate(fresh_tls.rate()),
            fresh_share * 100.0,
            handshake_cpu_ms,
            of_ceiling * 100.0,
            of_ceiling_cpu * 100.0,
            fresh_of_ceiling * 100.0
        ),
        target: "measured (no target)".into(),
        status: untargeted_status(settings, failed),
        raw: json!({
            "keep_alive": {
                "node_https_vs_plain": {"node_https": kept_tls.json(), "node_plain": kept_plain.json()},
                "node_https_vs_ceiling": {"node_https": kept_tls_vs_ceiling.json(), "ceiling_https": kept_ceiling.json()},
            },
            "connection_per_request": {
                "node_https_vs_ceiling": {"node_https": fresh_tls_vs_ceiling.json(), "ceiling_https": fresh_ceiling.json()},
                "node_https_vs_plain": {"node_https": fresh_tls.json(), "node_plain": fresh_plain.json()},
            },
            "keep_alive_https_share_of_plain": kept_share,
            "keep_alive_https_share_of_plain_per_cpu": kept_cpu_share,
            "connection_per_request_https_share_of_plain": fresh_share,
            "node_cpu_ms_per_tls_handshake": handshake_cpu_ms,
            "keep_alive_share_of_ceiling": of_ceiling,
            "keep_alive_share_of_ceiling_per_cpu": of_ceiling_cpu,
            "connection_per_request_share_of_ceiling": fresh_of_ceiling,
            // Thousands of connections a second leave as many TIME_WAIT sockets on
            // loopback; with none failed, the ports did not run out.
            "time_wait_sockets_after": time_wait_sockets(),
            "node_https_rss_mb": https.rss_mb(), "node_plain_rss_mb": plain.rss_mb(),
            "ceiling_rss_mb": ceiling.rss_mb(),
        }),
    })
}

fn numbers(side: &Side) -> String {
    format!(
        "{} req/s ({} req/CPU-s), p50 {:.2} ms, p99 {:.2} ms",
        fmt_rate(side.rate()),
        fmt_rate(side.per_cpu()),
        side.total.p(0.5),
        side.total.p(0.99)
    )
}

/// Write a leaf certificate for `localhost` and 127.0.0.1, signed by a fresh CA,
/// and its key; the connector trusts that CA alone and offers ALPN `http/1.1`.
fn certificates(cert_file: &Path, key_file: &Path) -> Result<TlsConnector> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "agora-bench row 17 CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let leaf_key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?
        .signed_by(&leaf_key, &Issuer::new(ca, ca_key))?;
    std::fs::write(cert_file, leaf.pem())?;
    std::fs::write(key_file, leaf_key.serialize_pem())?;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone())?;
    let mut client =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Every new connection a full handshake (see the module doc).
    client.resumption = rustls::client::Resumption::disabled();
    Ok(TlsConnector::from(Arc::new(client)))
}

/// Row 1's ceiling answering `reply` over HTTPS with the row's certificate.
fn ceiling_over_tls(dir: &Path, reply: &Bytes, cert_file: &Path, key_file: &Path) -> Result<Server> {
    let body_file = dir.join("ceiling-reply.json");
    std::fs::write(&body_file, reply)?;
    let port = procs::free_port();
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["ceiling", "--port", &port.to_string(), "--body-file"])
        .arg(&body_file)
        .arg("--tls-cert")
        .arg(cert_file)
        .arg("--tls-key")
        .arg(key_file);
    let (ceiling, _) = procs::spawn(
        "ceiling (HTTPS)",
        command,
        port,
        "listening on",
        Duration::from_secs(30),
    )?;
    Ok(ceiling)
}

/// Sockets in TIME_WAIT on this machine (IPv4), from /proc/net/tcp.
fn time_wait_sockets() -> usize {
    std::fs::read_to_string("/proc/net/tcp")
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| line.split_whitespace().nth(3) == Some("06"))
                .count()
        })
        .unwrap_or(0)
}
