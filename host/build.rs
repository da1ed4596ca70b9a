//! `include_dir!` (the SDK sources and bindings `plugin new` writes out) is not
//! tracked by cargo: without this, editing them leaves a binary that embeds the
//! old copies. Cargo scans a named folder recursively.

fn main() {
    for folder in [
        "../plugin-sdk/src",
        "../plugin-sdk/bindings",
        "../plugin-sdk/wit",
        "../plugin-sdk/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={folder}");
    }
}
