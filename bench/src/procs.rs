//! The processes under test: the release `agora-node` binary, the ceiling
//! server (this binary's `ceiling` subcommand) and the Python reference peers,
//! each on its own loopback port, with their CPU time and RSS read from /proc.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Below the kernel's ephemeral range, where the load drivers' own connections
/// cannot take a port between its probe and the node's bind.
pub use agora_test_postgres::free_port;

/// One definition of the workspace root for the driver and the library half.
pub use agora_bench::repo_root;

pub fn plugins_build_dir() -> PathBuf {
    repo_root().join("target/plugins/wasm32-wasip2/plugin")
}

/// The built `.wasm` of a plugin package.
pub fn plugin_wasm(package: &str) -> Result<PathBuf> {
    let path = plugins_build_dir().join(format!("{}.wasm", package.replace('-', "_")));
    if !path.exists() {
        bail!(
            "{} is not built (run bench/run, or build the plugins)",
            path.display()
        );
    }
    Ok(path)
}

/// Install a plugin the way a user would: write a temporary file, then rename.
pub fn install_bytes(plugins_dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(plugins_dir)?;
    let temp = plugins_dir.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, plugins_dir.join(format!("{name}.wasm")))?;
    Ok(())
}

/// A child process killed when dropped, with its output lines kept.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU seconds this process has used so far (threads included).
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid()).unwrap_or(0.0)
    }

    pub fn rss_mb(&self) -> f64 {
        rss_kb(self.pid()).unwrap_or(0) as f64 / 1024.0
    }

    pub fn peak_rss_mb(&self) -> f64 {
        peak_rss_kb(self.pid()).unwrap_or(0) as f64 / 1024.0
    }

    /// Lines logged so far (a mark for [`Server::log_since`]).
    pub fn log_len(&self) -> usize {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The lines logged after the mark `from`.
    pub fn log_since(&self, from: usize) -> Vec<String> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.get(from..).map(<[String]>::to_vec).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.iter()
            .rev()
            .take(20)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn clock_ticks() -> f64 {
    // Linux reports /proc times in USER_HZ, which is 100 on every supported architecture.
    100.0
}

pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

pub fn rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS:")
}

/// The most resident memory the process has had so far (`VmHWM`).
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmHWM:")
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Spawn `command`, collect its stdout/stderr lines, and wait until a line
/// contains `ready` (or, with `ready` empty, until the port accepts connections).
pub fn spawn(
    name: &str,
    mut command: Command,
    port: u16,
    ready: &str,
    patience: Duration,
) -> Result<(Server, Duration)> {
    let started = Instant::now();
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("starting {name}"))?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Instant>();
    for stream in [
        Box::new(child.stdout.take().expect("piped")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().expect("piped")),
    ] {
        let sink = log.clone();
        let tx = ready_tx.clone();
        let ready = ready.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if !ready.is_empty() && line.contains(&ready) {
                    let _ = tx.send(Instant::now());
                }
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                if log.len() < 10_000 {
                    log.push(line);
                }
            }
        });
    }
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut server = Server { child, addr, log };
    let deadline = started + patience;
    let ready_at = if ready.is_empty() {
        loop {
            if std::net::TcpStream::connect(addr).is_ok() {
                break Instant::now();
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                bail!("{name} exited early ({status}):\n{}", server.log_tail());
            }
            if Instant::now() > deadline {
                bail!("{name} did not listen on {addr}:\n{}", server.log_tail());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    } else {
        loop {
            match ready_rx.recv_timeout(Duration::from_millis(50)) {
                Ok(at) => break at,
                Err(_) => {
                    if let Ok(Some(status)) = server.child.try_wait() {
                        bail!("{name} exited early ({status}):\n{}", server.log_tail());
                    }
                    if Instant::now() > deadline {
                        bail!("{name} did not become ready:\n{}", server.log_tail());
                    }
                }
            }
        }
    };
    Ok((server, ready_at - started))
}

/// Where the node binary is: `--node-bin`, else the release build, else the debug build.
pub fn node_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        // Absolute: the node runs with its data folder as working directory.
        return std::path::absolute(path).context("the --node-bin path");
    }
    for profile in ["release", "debug"] {
        let path = repo_root().join("target").join(profile).join("agora-node");
        if path.exists() {
            return Ok(path);
        }
    }
    bail!("no agora-node binary: run `cargo build --release -p agora-node` first")
}

/// How to start a node: its data folder, plugins and environment.
pub struct NodeSpec<'a> {
    pub binary: &'a Path,
    pub data_dir: &'a Path,
    pub plugins: &'a [&'a str],
    pub env: &'a [(&'a str, String)],
}

/// Start the node in `data_dir` (its plugins folder filled first) and wait until it
/// listens and its start-up plugin load is done (the node listens first and loads
/// its plugins in the background).
pub fn start_node(spec: &NodeSpec) -> Result<(Server, Duration)> {
    let plugins_dir = spec.data_dir.join("plugins");
    std::fs::create_dir_all(&plugins_dir)?;
    for package in spec.plugins {
        let bytes = std::fs::read(plugin_wasm(package)?)?;
        install_bytes(&plugins_dir, package, &bytes)?;
    }
    let port = free_port();
    let mut command = Command::new(spec.binary);
    command
        .arg("serve")
        .current_dir(spec.data_dir)
        .env("AGORA_DATA_DIR", spec.data_dir)
        .env("AGORA_LISTEN", format!("127.0.0.1:{port}"))
        .env("AGORA_LOG_FORMAT", "human")
        // Per-request logging would measure the terminal, not the node; the loader's
        // start-up lines are what says the node is ready.
        .env("RUST_LOG", "warn,agora_node::runtime::loader=info")
        .env("NO_COLOR", "1");
    for (key, value) in spec.env {
        command.env(key, value);
    }
    spawn(
        "agora-node",
        command,
        port,
        "start-up plugin load done",
        Duration::from_secs(120),
    )
}

/// A venv under target/venvs/NAME with `packages`, made the way the e2e harness
/// makes it (same folder, same stamp), so the two share it.
pub fn python_venv(name: &str, packages: &[&str]) -> Result<PathBuf> {
    let venv = repo_root().join("target/venvs").join(name);
    let python = venv.join("bin/python");
    let stamp = venv.join(".installed");
    let wanted = packages.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()?
        .success();
    if !ok {
        bail!("creating the venv {name} failed");
    }
    let ok = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status()?
        .success();
    if !ok {
        bail!("pip install {packages:?} failed");
    }
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}
