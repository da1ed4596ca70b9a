//! Library half of the benchmark harness: what both the `agora-bench` driver
//! and the criterion benches measure in process (issue 9, rows 3 and 8).

pub mod floor;
pub mod plugin_call;

use std::path::{Path, PathBuf};

/// The workspace root (the folder holding `bench/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}
