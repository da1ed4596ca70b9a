//! Row 16 (issue 42): the node against the peer a user weighing a plugin host
//! would pick instead, `wasmtime serve` of the node's own wasmtime major (48).
//! It serves `bench/plugins/wasmtime-serve-converter`, row 1's unit conversion
//! as a `wasi:http` component, with a fresh instance per request from the
//! pooling allocator, the path the node takes for row 1. Both answer row 1's
//! request; a reply counts only if it is the node's exact bytes. Node and peer
//! are alternated in closed loop as row 1 does, per second and per CPU-second
//! of each server process.
//!
//! Both pools get the node's tuning (host/src/runtime/engine.rs): the row then
//! compares what runs around the instance, not two pool configurations. The
//! component is served from its `.wasm`, compiled once at start-up: a
//! precompiled `.cwasm` would only shorten that start, which is not measured.
//!
//! `bench/run` installs wasmtime-cli under `target/wasmtime-cli` for full runs
//! only (a 15–30 minute build). A smoke run without it serves the same
//! component in this process, on the harness's own wasmtime (the node's
//! crates and features), so the row's plumbing is exercised in CI.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, Scheme};
use wasmtime_wasi_http::{
    RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use crate::fixture::{agora_target, converter_node, temp_dir};
use crate::load::{self, CheckFn, Target};
use crate::procs::{self, Server};
use crate::report::{Row, fmt_rate, verdict};
use crate::rounds::{Shape, Side, alternate, segment};
use crate::settings::Settings;

const COMPONENT: &str = "wasmtime-serve-converter";
const MEASURE: &str = "Agora single-round request: the node (Wasm plugin, fresh instance) vs wasmtime serve (wasi:http component, pooling allocator)";
const TARGET: &str = "node ≥ 1.0× wasmtime serve, per second and per CPU-s";

/// The node's pooling tuning (host/src/runtime/engine.rs), given to the peer too.
const MEMORY_KEEP_RESIDENT: usize = 2 << 20;
const TABLE_KEEP_RESIDENT: usize = 64 << 10;
const DECOMMIT_BATCH: usize = 16;

/// Where `bench/run` installs wasmtime-cli.
fn wasmtime_cli() -> PathBuf {
    procs::repo_root().join("target/wasmtime-cli/bin/wasmtime")
}

/// `wasmtime serve`'s flags: the pooling allocator with the node's tuning;
/// `-S cli`, the WASI interfaces beyond the proxy world that Rust's std
/// imports (the node links them for its plugins too); and (its WASIp2
/// default, said aloud) a fresh instance for every request.
fn serve_flags() -> Vec<String> {
    [
        "pooling-allocator=y".to_string(),
        format!("pooling-memory-keep-resident={MEMORY_KEEP_RESIDENT}"),
        format!("pooling-table-keep-resident={TABLE_KEEP_RESIDENT}"),
        "pooling-pagemap-scan=auto".to_string(),
        format!("pooling-decommit-batch-size={DECOMMIT_BATCH}"),
    ]
    .into_iter()
    .flat_map(|option| ["-O".to_string(), option])
    .chain(["-S", "cli=y", "--max-instance-reuse-count", "1"].map(String::from))
    .collect()
}

/// A reply is right only if it is the node's own reply, byte for byte.
fn node_reply(reply: &Bytes) -> CheckFn {
    let expected = reply.clone();
    Arc::new(move |status, body| status == 200 && body == expected.as_ref())
}

pub async fn row16(settings: &Settings) -> Result<Row> {
    let component = procs::plugin_wasm(COMPONENT)?;
    let cli = wasmtime_cli();
    if !cli.exists() && !settings.smoke {
        bail!(
            "{} is missing: bench/run installs wasmtime-cli 48 there for full runs",
            cli.display()
        );
    }
    let data = temp_dir()?;
    let (node, request, reply) = converter_node(settings, data.path(), &[]).await?;
    let node_target = agora_target(&node, "/agora", request, node_reply(&reply));
    if cli.exists() {
        against_cli(settings, &cli, &component, (&node_target, &node)).await
    } else {
        against_stand_in(settings, &component, (&node_target, &node)).await
    }
}

async fn against_cli(
    settings: &Settings,
    cli: &Path,
    component: &Path,
    node: (&Target, &Server),
) -> Result<Row> {
    let version = cli_version(cli)?;
    let flags = serve_flags();
    let port = procs::free_port();
    let mut command = Command::new(cli);
    command
        .arg("serve")
        .args(&flags)
        .arg(format!("--addr=127.0.0.1:{port}"))
        .arg(component);
    let (peer, _) = procs::spawn(
        "wasmtime serve",
        command,
        port,
        "Serving HTTP on",
        Duration::from_secs(60),
    )?;
    // Row 1's request and check, sent to the peer.
    let peer_target = Target {
        addr: peer.addr,
        ..node.0.clone()
    };
    let (node_side, peer_side) = alternate(
        settings,
        settings.connections,
        node,
        (&peer_target, &peer),
        Shape::Closed,
    )
    .await;
    Ok(judged(
        settings,
        (&node_side, &peer_side),
        format!("({version})"),
        "",
        json!({
            "wasmtime_serve": peer_side.json(),
            "wasmtime_version": version, "wasmtime_flags": flags,
            "node_rss_mb": node.1.rss_mb(), "wasmtime_rss_mb": peer.rss_mb(),
        }),
    ))
}

/// Row 16 from the node's and the peer's sides, the same for the CLI and the
/// stand-in: `peer_note` follows the peer's rates, `ratio_note` the ratios, and
/// `raw` is merged into the row's JSON.
fn judged(
    settings: &Settings,
    (node_side, peer_side): (&Side, &Side),
    peer_note: String,
    ratio_note: &str,
    mut raw: Value,
) -> Row {
    let ratio = node_side.rate() / peer_side.rate().max(1e-9);
    let cpu_ratio = node_side.per_cpu() / peer_side.per_cpu().max(1e-9);
    let failed = node_side.total.failed + peer_side.total.failed;
    raw["node"] = node_side.json();
    raw["throughput_ratio"] = json!(ratio);
    raw["per_cpu_ratio"] = json!(cpu_ratio);
    Row {
        id: 16,
        measure: MEASURE.into(),
        node: rates(node_side),
        comparison: format!("{} {peer_note}", rates(peer_side)),
        ratio: format!("{ratio:.2}× per second, {cpu_ratio:.2}× per CPU-s{ratio_note}"),
        target: TARGET.into(),
        status: status(settings, failed, ratio >= 1.0 && cpu_ratio >= 1.0),
        raw,
    }
}

fn cli_version(cli: &Path) -> Result<String> {
    let output = Command::new(cli)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", cli.display()))?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !version.starts_with("wasmtime 48.") {
        bail!(
            "{} is {version:?}, not wasmtime 48 (the node's): rerun bench/run to reinstall it",
            cli.display()
        );
    }
    Ok(version)
}

fn rates(side: &Side) -> String {
    format!(
        "{} req/s ({} req/CPU-s)",
        fmt_rate(side.rate()),
        fmt_rate(side.per_cpu())
    )
}

/// Failed if either side answered wrongly (the comparison would mean nothing), else the verdict.
fn status(settings: &Settings, failed: u64, met: bool) -> String {
    if failed > 0 {
        "failed".into()
    } else {
        verdict(settings, met)
    }
}

// ---------------------------------------------------------------- the smoke stand-in

/// Smoke runs without wasmtime-cli: a node segment, then a stand-in segment,
/// each round; the stand-in's CPU is read from its own threads.
async fn against_stand_in(settings: &Settings, component: &Path, node: (&Target, &Server)) -> Result<Row> {
    let stand_in = StandIn::start(component)?;
    // Row 1's request and check, sent to the stand-in.
    let stand_in_target = Target {
        addr: stand_in.addr,
        ..node.0.clone()
    };
    let (mut node_side, mut stand_in_side) = (Side::new(), Side::new());
    for _ in 0..settings.rounds {
        segment(
            settings,
            settings.connections,
            node.0,
            node.1,
            Shape::Closed,
            &mut node_side,
        )
        .await;
        // Unrecorded warm-up, then the measured part with the stand-in's CPU read around it.
        load::closed_loop(
            &stand_in_target,
            settings.connections,
            Duration::ZERO,
            settings.warmup,
            0,
        )
        .await;
        let cpu_before = stand_in.cpu_seconds();
        let measured = load::closed_loop(
            &stand_in_target,
            settings.connections,
            Duration::ZERO,
            settings.duration,
            1 << 32,
        )
        .await;
        stand_in_side.cpu_seconds += stand_in.cpu_seconds() - cpu_before;
        stand_in_side.total.merge(&measured);
    }
    Ok(judged(
        settings,
        (&node_side, &stand_in_side),
        "(in-process stand-in: the component on the harness's wasmtime 48, pooling \
         allocator; wasmtime-cli is not built in smoke runs)"
            .into(),
        " (stand-in)",
        json!({
            "stand_in": stand_in_side.json(),
            "wasmtime_version": "48 (in-process stand-in: the harness's wasmtime crate, the node's features)",
            "wasmtime_flags": serve_flags(),
        }),
    ))
}

/// Names the stand-in's threads, so their CPU time can be told from the load
/// driver's (15 bytes at most: what Linux keeps of a thread's name).
const STAND_IN_THREAD: &str = "wasmtime-stand";

/// `wasmtime serve` in miniature: an HTTP/1.1 server on its own runtime
/// threads, a fresh pooled instance of the component for every request.
struct StandIn {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl StandIn {
    fn start(component: &Path) -> Result<StandIn> {
        let pre =
            proxy_pre(component).map_err(|e| anyhow!("serving {} in process: {e:?}", component.display()))?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(STAND_IN_THREAD)
            .enable_all()
            .build()
            .context("starting the stand-in's runtime")?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let pre = pre.clone();
            async move { answer(pre, request).await }
        });
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(listener, app).await
        });
        Ok(StandIn {
            addr,
            runtime: Some(runtime),
        })
    }

    /// CPU seconds the stand-in's own threads have used.
    fn cpu_seconds(&self) -> f64 {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return 0.0;
        };
        tasks
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|name| name.trim_end() == STAND_IN_THREAD)
            })
            .filter_map(|task| task.file_name().to_str()?.parse().ok())
            .filter_map(procs::cpu_seconds)
            .sum()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        // Dropped inside the driver's async context, where a blocking shutdown would panic.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The component compiled and pre-linked against the `wasi:http/proxy` world,
/// on an engine with the pooling allocator tuned as the node's.
fn proxy_pre(component: &Path) -> wasmtime::Result<ProxyPre<RequestState>> {
    let mut pool = PoolingAllocationConfig::default();
    pool.linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
        .table_keep_resident(TABLE_KEEP_RESIDENT)
        .pagemap_scan(Enabled::Auto)
        .decommit_batch_size(DECOMMIT_BATCH);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config)?;
    let component = Component::from_file(&engine, component)?;
    // What `wasmtime serve -S cli` links, as the node does for its plugins.
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    ProxyPre::new(linker.instantiate_pre(&component)?)
}

/// One request: a fresh store and instance, the component's answer, or a 500 saying why not.
async fn answer(pre: ProxyPre<RequestState>, request: axum::extract::Request) -> axum::response::Response {
    match handle(pre, request).await {
        Ok(response) => response,
        Err(error) => axum::response::IntoResponse::into_response((
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("{error:#}"),
        )),
    }
}

async fn handle(
    pre: ProxyPre<RequestState>,
    request: axum::extract::Request,
) -> Result<axum::response::Response> {
    let mut store = Store::new(pre.engine(), RequestState::new());
    let request = request.map(|body| body.map_err(|_| ErrorCode::HttpProtocolError));
    let incoming = store
        .data_mut()
        .http()
        .new_incoming_request(Scheme::Http, request)
        .map_err(|e| anyhow!("{e:?}"))?;
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let outparam = store
        .data_mut()
        .http()
        .new_response_outparam(sender)
        .map_err(|e| anyhow!("{e:?}"))?;
    // The call goes on after the response head is sent: it writes the body.
    let call = tokio::spawn(async move {
        let proxy = pre.instantiate_async(&mut store).await?;
        proxy
            .wasi_http_incoming_handler()
            .call_handle(&mut store, incoming, outparam)
            .await
    });
    match receiver.await {
        Ok(Ok(response)) => Ok(response.map(axum::body::Body::new)),
        Ok(Err(code)) => Err(anyhow!("the component answered the error {code:?}")),
        Err(_) => match call.await {
            Ok(Ok(())) => Err(anyhow!("the component set no response")),
            Ok(Err(error)) => Err(anyhow!("the component failed: {error:?}")),
            Err(error) => Err(anyhow!("the call's task failed: {error}")),
        },
    }
}

/// A request's store: WASI and wasi:http state, no outgoing HTTP.
struct RequestState {
    table: ResourceTable,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: NoOutgoingHttp,
}

impl RequestState {
    fn new() -> RequestState {
        RequestState {
            table: ResourceTable::new(),
            wasi: WasiCtx::builder().build(),
            http: WasiHttpCtx::new(),
            hooks: NoOutgoingHttp,
        }
    }
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// The converter makes no outgoing requests; any attempt is refused.
struct NoOutgoingHttp;

type HttpError = wasmtime_wasi_http::Error;
/// What `send_request` is given and answers (`WasiHttpHooks`' signature).
type Sent = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
type Answer = Result<(hyper::Response<WasiBody>, Sent), HttpError>;

impl WasiHttpHooks for NoOutgoingHttp {
    fn send_request(
        &mut self,
        _request: hyper::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _sent: Sent,
    ) -> Box<dyn Future<Output = Answer> + Send> {
        Box::new(async { Err(HttpError::HttpRequestDenied) })
    }
}
