//! Library half of the benchmark harness: what both the `agora-bench` driver
//! and the criterion benches measure in process (issue 9, rows 3 and 8).

pub mod floor;
pub mod plugin_call;

/// The node's own allocator (`host/src/main.rs`), for every process this crate
/// builds: the ceiling, the crypto floors and row 8's calls in process are what
/// the node is compared with, so they allocate as the node does. The load
/// driver runs on it too.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};

/// The workspace root (the folder holding `bench/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}
