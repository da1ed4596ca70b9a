//! The shared wasmtime engine: pooling allocation, epoch interruption and the
//! compiled-artifact cache.
//!
//! One epoch ticker thread serves the whole engine (a timer per request costs
//! orders of magnitude in throughput — wasmtime issue 11814). Compiled
//! components are cached on disk keyed by the plugin's content hash and the
//! engine's compatibility hash, so a restart or a re-save of an unchanged file
//! never recompiles. Every save of a changed plugin adds an entry (tens of MB
//! for a Python or JavaScript component), so [`evict_unused`] keeps the folder
//! within `plugins.cache_max_mb`, dropping the least recently used entries no
//! loaded plugin needs; a hit refreshes an entry's modification time.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

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
// The one place the node runs `unsafe`: wasmtime cannot check that precompiled
// bytes came from a compatible engine, so loading them is the caller's promise.
#[allow(unsafe_code)]
/// Compile `bytes`, or load their compiled form from `cache_dir`; `true` with a cache hit.
pub fn compile_cached(
    engine: &Engine,
    cache_dir: &Path,
    bytes: &[u8],
) -> wasmtime::Result<(Component, bool)> {
    let path = cache_path(engine, cache_dir, bytes);
    if path.exists() {
        // SAFETY: the file was written by `precompile_component` of an engine with the
        // same compatibility hash (part of its name) into the node's own cache folder,
        // which the node alone writes. A corrupt or foreign file fails validation and
        // falls through to a fresh compile below.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                // Recency for eviction; a read-only cache only loses that ordering.
                let _ = std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|file| file.set_modified(SystemTime::now()));
                return Ok((component, true));
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "discarding unusable cached plugin")
            }
        }
    }
    let compiled = engine.precompile_component(bytes)?;
    if std::fs::create_dir_all(cache_dir).is_ok() {
        // Several nodes may share a cache folder and compile the same plugin at
        // once: each writes its own temporary file, and the rename is atomic.
        let temp = path.with_extension(format!("tmp.{}.{}", std::process::id(), unique_suffix()));
        if std::fs::write(&temp, &compiled)
            .and_then(|()| std::fs::rename(&temp, &path))
            .is_err()
        {
            tracing::warn!(path = %path.display(), "could not write the compile cache");
        }
    }
    // SAFETY: `compiled` was produced just now by `precompile_component` on this engine.
    unsafe { Component::deserialize(engine, &compiled) }.map(|component| (component, false))
}

fn cache_path(engine: &Engine, cache_dir: &Path, bytes: &[u8]) -> PathBuf {
    let content = hex::encode(Sha256::digest(bytes));
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    cache_dir.join(format!("{content}-{:016x}.cwasm", hasher.finish()))
}

/// What one [`evict_unused`] pass removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    pub entries: usize,
    pub bytes: u64,
}

/// Bring the compile cache in `cache_dir` within `max_bytes` by deleting the
/// least recently used entries whose content hash (the first part of the
/// name, as [`cache_path`] writes it) is not in `in_use`. Entries of loaded
/// plugins stay even when they alone exceed the bound: deleting them would
/// only make the next start compile them again. A missing folder is an empty
/// cache.
pub fn evict_unused(cache_dir: &Path, in_use: &HashSet<String>, max_bytes: u64) -> Evicted {
    let mut evicted = Evicted::default();
    let Ok(listing) = std::fs::read_dir(cache_dir) else {
        return evicted;
    };
    let mut total = 0u64;
    let mut unused = Vec::new();
    for entry in listing.flatten() {
        let path = entry.path();
        let Ok(metadata) = entry.metadata() else { continue };
        if !metadata.is_file() || path.extension().is_none_or(|e| e != "cwasm") {
            continue;
        }
        total += metadata.len();
        let content = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .and_then(|stem| stem.split('-').next())
            .unwrap_or_default();
        if !in_use.contains(content) {
            let used = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            unused.push((used, metadata.len(), path));
        }
    }
    unused.sort();
    for (_, size, path) in unused {
        if total <= max_bytes {
            break;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= size;
                evicted.entries += 1;
                evicted.bytes += size;
            }
            Err(error) => tracing::warn!(path = %path.display(), %error, "cannot evict a cached plugin"),
        }
    }
    if evicted.entries > 0 {
        tracing::info!(
            entries = evicted.entries,
            bytes = evicted.bytes,
            "compile cache trimmed"
        );
    }
    evicted
}

/// A number no other temporary file of this process has used.
fn unique_suffix() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache entry of `size` bytes for `content`, last used `age_secs` ago.
    fn entry(dir: &Path, content: &str, size: usize, age_secs: u64) -> PathBuf {
        let path = dir.join(format!("{content}-00000000000000ff.cwasm"));
        std::fs::write(&path, vec![0u8; size]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(age_secs))
            .unwrap();
        path
    }

    #[test]
    fn eviction_drops_the_oldest_unused_entries_until_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let oldest = entry(dir.path(), "aa", 400, 300);
        let old = entry(dir.path(), "bb", 400, 200);
        let recent = entry(dir.path(), "cc", 400, 100);
        let loaded = entry(dir.path(), "dd", 400, 1000);
        let foreign = dir.path().join("notes.txt");
        std::fs::write(&foreign, vec![0u8; 4000]).unwrap();
        let in_use = HashSet::from(["dd".to_string()]);

        assert_eq!(
            evict_unused(dir.path(), &in_use, 1600),
            Evicted::default(),
            "within the bound"
        );
        assert_eq!(
            evict_unused(dir.path(), &in_use, 1000),
            Evicted {
                entries: 2,
                bytes: 800
            }
        );
        assert!(!oldest.exists() && !old.exists());
        assert!(recent.exists() && loaded.exists() && foreign.exists());

        // Entries of loaded plugins stay even when they alone are over the bound.
        assert_eq!(
            evict_unused(dir.path(), &in_use, 0),
            Evicted {
                entries: 1,
                bytes: 400
            }
        );
        assert!(!recent.exists() && loaded.exists());
        assert_eq!(
            evict_unused(&dir.path().join("missing"), &in_use, 0),
            Evicted::default()
        );
    }

    #[test]
    fn a_cache_hit_makes_an_entry_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        // The empty component, `(component)` in the binary format.
        let bytes = b"\0asm\x0d\x00\x01\x00";
        assert!(
            !compile_cached(&engine, dir.path(), bytes).unwrap().1,
            "a miss first"
        );
        let path = cache_path(&engine, dir.path(), bytes);
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        file.set_modified(long_ago).unwrap();
        assert!(
            compile_cached(&engine, dir.path(), bytes).unwrap().1,
            "then a hit"
        );
        assert!(std::fs::metadata(&path).unwrap().modified().unwrap() > long_ago);
    }
}
