//! `include_dir!` (the SDK sources and bindings `plugin new` writes out) is not
//! tracked by cargo: without this, editing them leaves a binary that embeds the
//! old copies.
//!
//! Each file is named on its own rather than each folder: cargo scans a named
//! folder recursively, and building a Python plugin against the bindings
//! (componentize-py writes `__pycache__` beside them, whatever
//! `PYTHONDONTWRITEBYTECODE` says) would then rebuild the node, as it did between
//! CI's tests and its benchmark smoke run. `plugin new` leaves the caches out, so
//! they are left out here too. A new file counts once the build script runs again,
//! which an edit to any tracked file (the one that imports it) triggers.

use std::path::Path;

fn main() {
    for tracked in [
        "../plugin-sdk/src",
        "../plugin-sdk/bindings",
        "../plugin-sdk/wit",
        "../plugin-sdk/Cargo.toml",
    ] {
        track(Path::new(tracked));
    }
}

fn track(path: &Path) {
    if path.file_name().is_some_and(|name| name == "__pycache__") {
        return;
    }
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                track(&entry.path());
            }
        }
        Err(_) => println!("cargo:rerun-if-changed={}", path.display()),
    }
}
