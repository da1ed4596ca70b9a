//! The end-to-end harness: real `agora-node` processes on loopback, real
//! plugins built from `plugins/` and `tests/fixtures/`, real sockets.
//!
//! A [`TestNode`] runs the binary with its own data folder and a free port,
//! waits until it prints that it listens, and is killed when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// `../shared/vectors` beside the checkout.
pub fn vectors_dir() -> PathBuf {
    repo_root().join("../shared/vectors")
}

/// Build every plugin and fixture once per test run, and return the folder of built `.wasm` files.
pub fn built_plugins() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = repo_root();
            let status = Command::new("bash")
                .arg("-c")
                .arg(r#"set -e; args=(); for m in plugins/*/Cargo.toml tests/fixtures/*/Cargo.toml; do args+=(-p "$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$m" | head -n 1)"); done; cargo build --quiet --profile plugin --target wasm32-wasip2 --target-dir target/plugins "${args[@]}""#)
                .current_dir(&root)
                .status()
                .expect("running cargo to build the plugins");
            assert!(status.success(), "building the plugins failed");
            root.join("target/plugins/wasm32-wasip2/plugin")
        })
        .clone()
}

/// The built `.wasm` of a plugin crate (package name, e.g. "unit-converter").
pub fn plugin_wasm(package: &str) -> PathBuf {
    let path = built_plugins().join(format!("{}.wasm", package.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// A protocol document's routing key: SHA1 of its exact bytes, hex (Agora two-party §8.2),
/// computed here independently of the node.
pub fn document_hash(text: &str) -> String {
    use sha1::Digest;
    hex::encode(sha1::Sha1::digest(text.as_bytes()))
}

/// The compile cache of the suite's throw-away nodes: one per test binary build,
/// so a rebuilt node never reads another build's entries by accident (the cache
/// is keyed by engine too; this only keeps the folder small).
fn shared_compile_cache() -> PathBuf {
    repo_root().join("target/e2e-compile-cache")
}

/// A loopback port for a server the test starts (see why it is not `bind(0)`'s).
pub use agora_test_postgres::free_port;

/// Install a plugin into a plugins folder the way a user would: write then rename.
pub fn install_plugin(plugins_dir: &Path, package: &str) -> PathBuf {
    install_bytes(
        plugins_dir,
        package,
        &std::fs::read(plugin_wasm(package)).expect("reading plugin"),
    )
}

pub fn install_bytes(plugins_dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    std::fs::create_dir_all(plugins_dir).unwrap();
    let target = plugins_dir.join(format!("{name}.wasm"));
    let temp = plugins_dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&temp, bytes).unwrap();
    std::fs::rename(&temp, &target).unwrap();
    target
}

pub struct TestNode {
    pub child: Child,
    pub port: u16,
    pub data_dir: PathBuf,
    pub plugins_dir: PathBuf,
    pub log: std::sync::Arc<Mutex<Vec<String>>>,
    _temp: Option<tempfile::TempDir>,
}

pub struct NodeBuilder {
    plugins: Vec<String>,
    env: Vec<(String, String)>,
    args: Vec<String>,
    data_dir: Option<PathBuf>,
    port: Option<u16>,
    listen_from_env: bool,
    dev: bool,
    wait_for_plugins: bool,
}

impl NodeBuilder {
    /// Install this plugin crate's build before start.
    pub fn plugin(mut self, package: &str) -> Self {
        self.plugins.push(package.to_string());
        self
    }
    /// An environment variable for the node (e.g. `AGORA_ARENA__AGENT_ID`).
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }
    /// Every `(key, value)` of `settings` as [`Self::env`].
    pub fn envs(mut self, settings: &[(&str, &str)]) -> Self {
        for (key, value) in settings {
            self = self.env(key, *value);
        }
        self
    }
    /// A node of a fleet: its store the PostgreSQL database at `url`.
    pub fn on_database(self, url: &str) -> Self {
        self.env("AGORA_STORE__BACKEND", "postgres")
            .env("AGORA_STORE__POSTGRES_URL", url)
    }
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }
    /// Reuse a data folder (restart tests).
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Start without setting `AGORA_LISTEN`: the listen address comes from a config
    /// file or flag, and `port` says where the test expects it.
    pub fn start_with_file_listen(mut self) -> TestNode {
        self.listen_from_env = false;
        self.start()
    }

    /// Start and return once the node listens, without waiting for its
    /// start-up plugin load (`/health` may still say "starting").
    pub fn start_listening(mut self) -> TestNode {
        self.wait_for_plugins = false;
        self.start()
    }

    /// Start `agora-node dev` instead of `serve`.
    pub fn start_dev(mut self) -> TestNode {
        self.dev = true;
        self.start()
    }

    pub fn start(self) -> TestNode {
        let wait_for_plugins = self.wait_for_plugins;
        let serves_tls = self.env.iter().any(|(key, _)| key == "AGORA_TLS__CERT_FILE");
        let (temp, data_dir) = match self.data_dir {
            Some(dir) => (None, dir),
            None => {
                let temp = tempfile::tempdir().unwrap();
                let dir = temp.path().to_path_buf();
                (Some(temp), dir)
            }
        };
        let plugins_dir = data_dir.join("plugins");
        for package in &self.plugins {
            install_plugin(&plugins_dir, package);
        }
        let port = self.port.unwrap_or_else(free_port);
        let mut command = Command::new(env!("CARGO_BIN_EXE_agora-node"));
        command
            .arg(if self.dev { "dev" } else { "serve" })
            .args(&self.args)
            .current_dir(&data_dir)
            .env("AGORA_DATA_DIR", &data_dir)
            .env("AGORA_LOG_FORMAT", "human")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.listen_from_env {
            command.env("AGORA_LISTEN", format!("127.0.0.1:{port}"));
        }
        if temp.is_some() {
            // Throw-away nodes share one compile cache, so a plugin is compiled once
            // per suite rather than once per test; a node on a test's own data folder
            // (restarts, the cache itself) keeps its cache there.
            command.env("AGORA_PLUGINS__CACHE_DIR", shared_compile_cache());
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("starting agora-node");
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = ready_tx.send(());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let node = TestNode {
            child,
            port,
            data_dir,
            plugins_dir,
            log,
            _temp: temp,
        };
        // A node listens at once and compiles its plugins in the background,
        // `/health` saying "starting" until every one is loaded or failed; a cold
        // compile of a 12-18 MB Python or JS component took over 60 s on a 2-core
        // machine loaded by parallel builds. This is a liveness deadline, not a
        // speed target.
        let patience = Duration::from_secs(240);
        if ready_rx.recv_timeout(patience).is_err() {
            panic!("agora-node did not start listening; log:\n{}", node.log_text());
        }
        if wait_for_plugins && serves_tls {
            // This harness's HTTP helpers speak plain http; a TLS node says it in its log.
            node.wait_for_log_within("start-up plugin load done", patience);
        } else if wait_for_plugins {
            node.wait_for_health_within("the start-up plugin load", patience, |health| {
                health["status"] != "starting"
            });
        }
        node
    }
}

impl TestNode {
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            plugins: Vec::new(),
            env: Vec::new(),
            args: Vec::new(),
            data_dir: None,
            port: None,
            listen_from_env: true,
            dev: false,
            wait_for_plugins: true,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://127.0.0.1:{}{path}", self.port)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Wait until `/health` satisfies `check`, or panic with the log.
    pub fn wait_for_health(
        &self,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.wait_for_health_within(what, Duration::from_secs(30), check)
    }

    /// [`Self::wait_for_health`] with a longer patience (builds).
    pub fn wait_for_health_within(
        &self,
        what: &str,
        patience: Duration,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + patience;
        loop {
            let health = get_json(&self.url("/health"));
            if let Ok(health) = &health
                && check(health)
            {
                return health.clone();
            }
            // Also when /health does not answer at all: a wait that never ends hides the cause.
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; health: {health:?}\nlog:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Poll `check` every `every` until it holds, or panic with `what` and the log
    /// once `patience` has passed (a deadline to give up, not a timed assertion).
    pub fn wait_until(
        &self,
        what: &str,
        patience: Duration,
        every: Duration,
        mut check: impl FnMut() -> bool,
    ) {
        let deadline = Instant::now() + patience;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(every);
        }
    }

    /// Wait until the log holds `needle`, or panic after 10 s. The node's
    /// output reaches the test through reader threads on its pipes, so a line
    /// the node wrote before answering may not be in [`Self::log_text`] yet
    /// when the answer is.
    pub fn wait_for_log(&self, needle: &str) {
        self.wait_for_log_within(needle, Duration::from_secs(10));
    }

    /// [`Self::wait_for_log`] with another patience.
    pub fn wait_for_log_within(&self, needle: &str, patience: Duration) {
        self.wait_until(
            &format!("{needle:?} in the log"),
            patience,
            Duration::from_millis(20),
            || self.log_text().contains(needle),
        );
    }

    /// Send SIGTERM without waiting, so a test can read the shutdown as it
    /// happens; [`Self::stop`] then waits for the exit.
    pub fn signal_stop(&self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
    }

    /// Stop with SIGTERM and wait (graceful shutdown).
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().unwrap()
    }

    /// Kill without warning (crash) and wait.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a plugin named `name` is loaded according to a /health document.
pub fn has_plugin(health: &serde_json::Value, name: &str) -> bool {
    health["plugins"]
        .as_array()
        .is_some_and(|plugins| plugins.iter().any(|p| p["name"] == name))
}

// --- Load while something changes (hot reloads, dev rebuilds) ---

/// What the load clients of [`under_load`] saw.
pub struct LoadReport {
    pub served: usize,
    pub failures: Vec<String>,
}

impl LoadReport {
    /// No request failed, and the load really ran (at least `min_served` answers).
    pub fn assert_no_failure(&self, min_served: usize) {
        assert!(
            self.failures.is_empty(),
            "{} failed requests, first: {:?}",
            self.failures.len(),
            self.failures.first()
        );
        assert!(
            self.served >= min_served,
            "the load loop barely ran: {} answers",
            self.served
        );
    }
}

/// Run `clients` threads, each calling `request(client, round)` in a loop, for as
/// long as `during` runs; an `Err` is a failed request. `during` starts once every
/// client has had its first answer (or failure), so the load is running by then:
/// on a busy machine a short `during` could otherwise end before a client's
/// thread even began.
pub fn under_load<T>(
    clients: usize,
    request: impl Fn(usize, u64) -> Result<(), String> + Sync,
    during: impl FnOnce() -> T,
) -> (T, LoadReport) {
    /// Stops the clients even when `during` panics (else the scope would wait forever).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    let served = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let outcome = std::thread::scope(|scope| {
        for client in 0..clients {
            let (stop, served, failures, request) = (&stop, &served, &failures, &request);
            scope.spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    match request(client, round) {
                        Ok(()) => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) => failures.lock().unwrap().push(error),
                    }
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        let started = std::time::Instant::now();
        while served.load(Ordering::Relaxed) + failures.lock().unwrap().len() < clients
            && started.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        during()
    });
    let report = LoadReport {
        served: served.into_inner(),
        failures: failures.into_inner().unwrap(),
    };
    (outcome, report)
}

// --- Blocking HTTP helpers over real sockets (ureq) ---

pub struct HttpReply {
    pub status: u16,
    pub content_type: String,
    pub headers: ureq::http::HeaderMap,
    pub body: String,
}

impl HttpReply {
    /// A response header's value, when it is there and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

fn finish(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> HttpReply {
    try_finish(response).expect("HTTP request failed")
}

/// A reply read whole, or why there is none (refused, reset, cut off mid-body).
fn try_finish(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<HttpReply, String> {
    let mut response = response.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let headers = response.headers().clone();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .map_err(|e| format!("reading the body: {e}"))?;
    Ok(HttpReply {
        status,
        content_type,
        headers,
        body,
    })
}

pub fn post(url: &str, content_type: &str, body: &[u8]) -> HttpReply {
    finish(agent().post(url).header("content-type", content_type).send(body))
}

pub fn post_with_headers(url: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
    try_post_with_headers(url, headers, body).expect("HTTP request failed")
}

/// A POST that reports a failed exchange instead of panicking (a node killed mid-request).
pub fn try_post_with_headers(url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<HttpReply, String> {
    let mut request = agent().post(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    try_finish(request.send(body))
}

pub fn post_json(url: &str, body: &serde_json::Value) -> HttpReply {
    post(url, "application/json", body.to_string().as_bytes())
}

pub fn get(url: &str) -> HttpReply {
    finish(agent().get(url).call())
}

pub fn get_with_headers(url: &str, headers: &[(&str, &str)]) -> HttpReply {
    let mut request = agent().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    finish(request.call())
}

pub fn delete(url: &str) -> HttpReply {
    delete_with_headers(url, &[])
}

pub fn delete_with_headers(url: &str, headers: &[(&str, &str)]) -> HttpReply {
    let mut request = agent().delete(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    finish(request.call())
}

pub fn put_with_headers(url: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
    let mut request = agent().put(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    finish(request.send(body))
}

pub fn get_json(url: &str) -> Result<serde_json::Value, String> {
    let response = agent().get(url).call().map_err(|e| e.to_string())?;
    let mut response = response;
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

// --- A test's own servers ---

/// A one-worker tokio runtime for a server the test runs (a peer, a model), and
/// a non-blocking loopback listener for it on a port the kernel chose, with that port.
pub fn server_runtime() -> (tokio::runtime::Runtime, std::net::TcpListener, u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (runtime, listener, port)
}

// --- Raw HTTP ---

/// One HTTP/1.1 request written by hand, for what the usual client cannot do:
/// come from another loopback address (another client to the node's
/// per-address bounds) or send a `Host` of its choosing (a rebinding page's).
pub struct RawRequest<'a> {
    pub from: std::net::IpAddr,
    pub method: &'a str,
    pub path: &'a str,
    /// `None`: the node's own `127.0.0.1:port`.
    pub host: Option<&'a str>,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

impl<'a> RawRequest<'a> {
    /// A JSON POST of `body` from `from`.
    pub fn post_json(from: std::net::IpAddr, path: &'a str, body: &'a [u8]) -> RawRequest<'a> {
        RawRequest {
            from,
            method: "POST",
            path,
            host: None,
            headers: &[("content-type", "application/json")],
            body,
        }
    }
}

pub struct RawReply {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Send `request` to `node` on a connection of its own (`Connection: close`) and read the reply.
pub fn raw_exchange(node: &TestNode, request: RawRequest<'_>) -> RawReply {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::new(request.from, 0).into())
        .unwrap_or_else(|e| panic!("binding a client socket to {}: {e}", request.from));
    socket
        .connect(&std::net::SocketAddr::from(([127, 0, 0, 1], node.port)).into())
        .expect("connecting to the node");
    let mut stream: std::net::TcpStream = socket.into();
    // A liveness deadline, not a latency target.
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let own = format!("127.0.0.1:{}", node.port);
    let mut head = format!(
        "{} {} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
        request.method,
        request.path,
        request.host.unwrap_or(&own),
        request.body.len()
    );
    for (name, value) in request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(request.body).unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{} {} from {}: {e}", request.method, request.path, request.from));
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(name, value)| name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    RawReply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}

// --- Python peers ---

/// `python script SCENARIO URL ARGS…`: how every peer scenario is started.
fn scenario_command(python: &Path, script: &str, scenario: &str, url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(python);
    command
        .arg(repo_root().join(script))
        .arg(scenario)
        .arg(url)
        .args(args);
    command
}

/// Run a reference peer's script (`tests/interop/...`) against `node` with
/// `python`: `script SCENARIO URL ARGS…`, which prints what it observed as one
/// JSON line last. A failing script fails the test with its output and the node's log.
pub fn run_scenario(
    python: &Path,
    script: &str,
    scenario: &str,
    url: &str,
    args: &[&str],
    node: &TestNode,
) -> serde_json::Value {
    let output = scenario_command(python, script, scenario, url, args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} {scenario} failed: {}\nstdout: {stdout}\nstderr: {stderr}\nnode log:\n{}",
        output.status,
        node.log_text()
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{scenario}: not one JSON line ({e}): {stdout}"))
}

/// A peer's scenario started like [`run_scenario`] that prints `ready` once
/// what it opened is in place (a stream it listens on), so the test acts on
/// the node only then; [`ReadyScenario::observed`] reads its last JSON line.
pub struct ReadyScenario {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    what: String,
}

impl ReadyScenario {
    pub fn start(
        python: &Path,
        script: &str,
        scenario: &str,
        url: &str,
        args: &[&str],
        node: &TestNode,
    ) -> Self {
        let mut child = scenario_command(python, script, scenario, url, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {script}: {e}"));
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let ready = lines.next().and_then(Result::ok).unwrap_or_default();
        assert_eq!(
            ready,
            "ready",
            "{script} {scenario} {args:?}: the first line; node log:\n{}",
            node.log_text()
        );
        ReadyScenario {
            child,
            lines,
            what: format!("{script} {scenario} {args:?}"),
        }
    }

    /// What the scenario observed, once it has ended (a failing one fails the test).
    pub fn observed(self) -> serde_json::Value {
        let last = self.lines.map_while(Result::ok).last().unwrap_or_default();
        let output = self.child.wait_with_output().expect("the scenario's exit");
        assert!(
            output.status.success(),
            "{} failed: {}\nstdout: {last}\nstderr: {}",
            self.what,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(&last)
            .unwrap_or_else(|e| panic!("{}: not one JSON line ({e}): {last}", self.what))
    }
}

/// The venv of the reference MCP SDK: the client driving the node's MCP server
/// and the FastMCP server the node calls as a client (one list, one venv).
pub fn mcp_python() -> PathBuf {
    python_venv("mcp", &["mcp==2.3.0"])
}

/// A virtualenv under `target/venvs/NAME` with `packages` installed, made once.
/// Interop tests run the real reference peers from it.
pub fn python_venv(name: &str, packages: &[&str]) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let venv = repo_root().join("target/venvs").join(name);
    let python = venv.join("bin/python");
    let stamp = venv.join(".installed");
    let wanted = packages.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("python3 -m venv")
        .success();
    assert!(ok, "creating the venv {name} failed");
    let ok = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status()
        .expect("pip install")
        .success();
    assert!(ok, "pip install {packages:?} failed");
    std::fs::write(&stamp, wanted).unwrap();
    python
}
