//! The Python and JavaScript helpers (`bindings/python/agora_plugin.py`,
//! `bindings/js/agora-plugin.js`) run under CPython and Node with the host's
//! calls replaced, so their error cases and argument reading are checked
//! without building a component. The scripts beside this file say what each
//! case expects; a failing case fails the test with the interpreter's report.

use std::path::{Path, PathBuf};
use std::process::Command;

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn run(mut command: Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_python_helper_types_host_errors_and_tool_arguments() {
    let mut python = Command::new("python3");
    python
        .arg(sdk_dir().join("src/script_tests/test_agora_plugin.py"))
        .env("PYTHONPATH", sdk_dir().join("bindings/python"))
        // The bindings folder is copied into scaffolds as is: no caches in it.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run(python);
}

#[test]
fn the_javascript_helper_types_host_errors_and_tool_arguments() {
    let mut node = Command::new("node");
    node.arg(sdk_dir().join("src/script_tests/agora-plugin.test.mjs"))
        .env("AGORA_JS_HELPER", sdk_dir().join("bindings/js/agora-plugin.js"));
    run(node);
}
