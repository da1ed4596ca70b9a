//! Row 8: what one plugin call costs the host, measured on the library's own
//! `Runtime` (no HTTP): instantiate from the pre-linked component in a pooled
//! slot, pass the message in, run `handle`, take the reply out, drop the store.
//! Row 6 uses the same to time the `bench-hai` assistant's call on its own.

use std::sync::Arc;
use std::time::Instant;

use agora_node::Config;
use agora_node::metrics::Metrics;
use agora_node::runtime::{Call, Exchange, LoadedPlugin, Phase, Runtime, TransportKind};
use agora_node::store::Store;
use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use std::future::Future;
use std::path::{Path, PathBuf};

/// The `bench-empty` plugin (bench/plugins/bench-empty) loaded in a runtime of its own.
pub struct Bench {
    runtime: Runtime,
    plugin: Arc<LoadedPlugin>,
    _dir: tempfile::TempDir,
}

pub struct Timing {
    pub calls: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

impl Timing {
    pub fn json(&self) -> Value {
        json!({"calls": self.calls, "p50_us": self.p50_us, "p99_us": self.p99_us, "mean_us": self.mean_us})
    }
}

/// The built `.wasm` of one of the bench plugins (bench/plugins/PACKAGE).
pub fn bench_plugin_wasm(package: &str) -> Result<PathBuf> {
    let file = format!("{}.wasm", package.replace('-', "_"));
    let path = crate::repo_root()
        .join("target/plugins/wasm32-wasip2/plugin")
        .join(file);
    if !path.exists() {
        return Err(anyhow!(
            "{} is missing: cargo build --profile plugin --target wasm32-wasip2 --target-dir target/plugins -p {package}",
            path.display()
        ));
    }
    Ok(path)
}

pub fn empty_plugin_wasm() -> Result<PathBuf> {
    bench_plugin_wasm("bench-empty")
}

impl Bench {
    pub async fn new() -> Result<Bench> {
        Bench::load(&empty_plugin_wasm()?, "bench-empty").await
    }

    /// The plugin in `wasm`, whose manifest is named `name`, in a runtime of its own.
    pub async fn load(wasm: &Path, name: &str) -> Result<Bench> {
        let dir = tempfile::tempdir()?;
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_path_buf();
        config.plugins.dir = dir.path().join("plugins");
        config.plugins.cache_dir = dir.path().join("cache");
        std::fs::create_dir_all(&config.plugins.dir)?;
        std::fs::copy(wasm, config.plugins.dir.join(format!("{name}.wasm")))?;
        let store = Store::temporary().context("temporary store")?;
        let runtime =
            Runtime::new(Arc::new(config), store, Metrics::new()).map_err(|e| anyhow!("runtime: {e:#}"))?;
        runtime.load_all().await;
        let plugin = runtime.registry().by_name(name).cloned().ok_or_else(|| {
            anyhow!(
                "{name} did not load: {:?}",
                runtime.status().first().and_then(|s| s.error.clone())
            )
        })?;
        Ok(Bench {
            runtime,
            plugin,
            _dir: dir,
        })
    }

    /// One call with a body of `body_bytes` bytes.
    pub async fn call(&self, body: &str) -> Result<String> {
        let call = Call {
            transport: TransportKind::Envelope,
            phase: Phase::Handle,
            route: "bench:empty:v1".into(),
            sender: None,
            conversation: None,
            body: body.to_string(),
        };
        self.runtime
            .invoke(&self.plugin, call, Exchange::new())
            .await
            .map_err(|e| anyhow!("{e}"))
    }

    /// One call as the HAI transport makes it: an assistant turn whose
    /// streamed events go to a channel the caller drains (row 6).
    pub async fn hai_call(&self, content: &str) -> Result<String> {
        let call = Call {
            transport: TransportKind::Hai,
            phase: Phase::Handle,
            route: "assistant".into(),
            sender: None,
            conversation: Some("bench".into()),
            body: serde_json::json!({"content": content, "session_id": "bench", "metadata": {}}).to_string(),
        };
        let (events, mut stream) = tokio::sync::mpsc::channel(64);
        let reply = self
            .runtime
            .invoke(&self.plugin, call, Exchange::new().with_events(events))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        while stream.try_recv().is_ok() {}
        Ok(reply)
    }

    /// `calls` calls with a body of `body_bytes` bytes, each timed.
    pub async fn measure(&self, body_bytes: usize, calls: usize) -> Result<Timing> {
        let body = "x".repeat(body_bytes);
        time_calls(calls, || self.call(&body)).await
    }

    /// `calls` HAI assistant calls ([`Bench::hai_call`]), each timed.
    pub async fn measure_hai(&self, calls: usize) -> Result<Timing> {
        time_calls(calls, || self.hai_call("hello")).await
    }
}

/// Warm up, then time `calls` calls of `call` one after the other.
async fn time_calls<F, Fut>(calls: usize, call: F) -> Result<Timing>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<String>>,
{
    for _ in 0..calls.min(200) {
        call().await?;
    }
    let mut micros = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let reply = call().await?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(reply);
    }
    let mean = micros.iter().sum::<f64>() / micros.len().max(1) as f64;
    micros.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| micros[((micros.len() as f64 * q) as usize).min(micros.len() - 1)];
    Ok(Timing {
        calls,
        p50_us: at(0.5),
        p99_us: at(0.99),
        mean_us: mean,
    })
}
