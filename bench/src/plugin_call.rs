//! Row 8: what one plugin call costs the host, measured on the library's own
//! `Runtime` (no HTTP): instantiate from the pre-linked component in a pooled
//! slot, pass the message in, run `handle`, take the reply out, drop the store.

use std::sync::Arc;
use std::time::Instant;

use agora_node::Config;
use agora_node::metrics::Metrics;
use agora_node::runtime::{Call, Exchange, LoadedPlugin, Phase, Runtime, TransportKind};
use agora_node::store::Store;
use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

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

pub fn empty_plugin_wasm() -> Result<std::path::PathBuf> {
    let path = crate::repo_root().join("target/plugins/wasm32-wasip2/plugin/bench_empty.wasm");
    if !path.exists() {
        return Err(anyhow!(
            "{} is missing: cargo build --profile plugin --target wasm32-wasip2 --target-dir target/plugins -p bench-empty",
            path.display()
        ));
    }
    Ok(path)
}

impl Bench {
    pub async fn new() -> Result<Bench> {
        let dir = tempfile::tempdir()?;
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_path_buf();
        config.plugins.dir = dir.path().join("plugins");
        config.plugins.cache_dir = dir.path().join("cache");
        std::fs::create_dir_all(&config.plugins.dir)?;
        std::fs::copy(empty_plugin_wasm()?, config.plugins.dir.join("bench-empty.wasm"))?;
        let store = Store::temporary().context("temporary store")?;
        let runtime =
            Runtime::new(Arc::new(config), store, Metrics::new()).map_err(|e| anyhow!("runtime: {e:#}"))?;
        runtime.load_all().await;
        let plugin = runtime
            .registry()
            .by_name("bench-empty")
            .cloned()
            .ok_or_else(|| {
                anyhow!(
                    "bench-empty did not load: {:?}",
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

    /// `calls` calls with a body of `body_bytes` bytes, each timed.
    pub async fn measure(&self, body_bytes: usize, calls: usize) -> Result<Timing> {
        let body = "x".repeat(body_bytes);
        for _ in 0..calls.min(200) {
            self.call(&body).await?;
        }
        let mut micros = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let reply = self.call(&body).await?;
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
}
