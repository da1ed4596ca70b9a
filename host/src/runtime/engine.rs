//! The shared wasmtime engine: pooling allocation, epoch interruption and the
//! compiled-artifact cache.
//!
//! One epoch ticker thread serves the whole engine (a timer per request costs
//! orders of magnitude in throughput — wasmtime issue 11814). Compiled
//! components are cached on disk keyed by the plugin's content hash and the
//! engine's compatibility hash, so a restart or a re-save of an unchanged file
//! never recompiles.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::config::PluginsConfig;

/// How often the epoch advances; call budgets are counted in these ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Largest table a plugin may define or grow to. The biggest bundled guests
/// need far less (a StarlingMonkey JavaScript component ~7,700 entries,
/// componentize-py ~5,700, a Rust plugin ~100); every pooled table slot
/// reserves this many pointers.
pub const MAX_TABLE_ELEMENTS: usize = 20_000;

/// Linear memory kept resident (reset with `memset`) when a pooled slot is
/// freed, instead of `madvise(DONTNEED)` and page faults on the next call.
/// Covers a Rust plugin's whole working set (~1.1 MiB); with PAGEMAP_SCAN
/// only the pages a call dirtied are reset.
const MEMORY_KEEP_RESIDENT: usize = 2 << 20;
/// The same for tables: all of the largest bundled guest's table (8 bytes an entry).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;
/// Decommits of what is beyond those sizes are batched, so one TLB shootdown
/// across the node's threads covers several freed slots.
const DECOMMIT_BATCH: usize = 16;

pub fn build_engine(limits: &PluginsConfig) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    let instances = limits.max_instances;
    pool.total_component_instances(instances);
    pool.total_core_instances(instances * 4);
    pool.total_memories(instances * 2);
    pool.total_tables(instances * 2);
    pool.max_memories_per_component(4);
    pool.max_tables_per_component(4);
    pool.max_core_instances_per_component(16);
    pool.max_memory_size((limits.max_memory_mb as usize) << 20);
    pool.table_elements(MAX_TABLE_ELEMENTS);
    // Per-call instances make freeing a slot the hot path: keep the memory a
    // call touched mapped, and reset only the dirty pages (kernel >= 6.7).
    pool.linear_memory_keep_resident(MEMORY_KEEP_RESIDENT);
    pool.table_keep_resident(TABLE_KEEP_RESIDENT);
    pool.pagemap_scan(Enabled::Auto);
    pool.decommit_batch_size(DECOMMIT_BATCH);

    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .wasm_component_model(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub fn start(engine: &Engine) -> EpochTicker {
        let stop = Arc::new(AtomicBool::new(false));
        let weak = engine.weak();
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("agora-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .expect("spawning the epoch thread");
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Compile a component, through the on-disk cache.
pub fn compile_cached(engine: &Engine, cache_dir: &Path, bytes: &[u8]) -> wasmtime::Result<Component> {
    let path = cache_path(engine, cache_dir, bytes);
    if path.exists() {
        // SAFETY: the file was written by `precompile_component` of an engine with the
        // same compatibility hash (part of its name) into the node's own cache folder,
        // which the node alone writes. A corrupt or foreign file fails validation and
        // falls through to a fresh compile below.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => return Ok(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "discarding unusable cached plugin")
            }
        }
    }
    let compiled = engine.precompile_component(bytes)?;
    if std::fs::create_dir_all(cache_dir).is_ok() {
        let temp = path.with_extension("tmp");
        if std::fs::write(&temp, &compiled)
            .and_then(|()| std::fs::rename(&temp, &path))
            .is_err()
        {
            tracing::warn!(path = %path.display(), "could not write the compile cache");
        }
    }
    // SAFETY: `compiled` was produced just now by `precompile_component` on this engine.
    unsafe { Component::deserialize(engine, &compiled) }
}

fn cache_path(engine: &Engine, cache_dir: &Path, bytes: &[u8]) -> PathBuf {
    let content = hex::encode(Sha256::digest(bytes));
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    cache_dir.join(format!("{content}-{:016x}.cwasm", hasher.finish()))
}
