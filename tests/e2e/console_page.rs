//! The operator's console page (issue 39) in Chromium, end to end: a real node
//! with the console on, the assistant and its tools, driven through the page
//! by `tests/browser/console.test.mjs` (playwright-core, Debian's chromium) while
//! the same script plays the HAI chat page, an A2A client and an MCP client.
//! What it shows is what an operator relies on: the page is nothing but the
//! sign-in without the token; an approval from each transport appears in the
//! one queue and the console's answer reaches its client; an upload loads, and
//! a broken one under the same name shows the compiler's reason while the old
//! version keeps serving; the charts count a burst; axe-core passes every view
//! at desktop and phone width. Screenshots of every view land in
//! `tests/browser/console-shots/` (for docs/).

use std::ffi::OsStr;
use std::path::Path;

use crate::console::{TOKEN, assistant_node};
use crate::hai::browser_script;
use crate::support;

/// Where the script photographs the views (gitignored there).
const SHOTS_DIR: &str = "tests/browser/console-shots";
const VIEWS: [&str; 6] = ["signin", "overview", "plugins", "approvals", "activity", "log"];
const WIDTHS: [&str; 2] = ["desktop", "phone"];

fn shot(shots: &Path, view: &str, width: &str) -> std::path::PathBuf {
    shots.join(format!("console-{view}-{width}.png"))
}

#[test]
fn the_console_page_answers_every_transports_approval_uploads_plugins_and_passes_axe() {
    let node = assistant_node();
    let root = support::repo_root();
    // A plugin whose protocol the script can call cheaply, and a file under the
    // same name whose bytes are not WebAssembly at all.
    let upload = support::plugin_wasm("unit-converter");
    let protocol = root.join("protocols/unit-conversion.md");
    let broken_dir = tempfile::tempdir().expect("a temporary folder");
    let broken = broken_dir
        .path()
        .join(upload.file_name().expect("the plugin's file name"));
    std::fs::write(&broken, b"this is not a WebAssembly component").expect("writing the broken plugin");
    let shots = root.join(SHOTS_DIR);
    for view in VIEWS {
        for width in WIDTHS {
            let _ = std::fs::remove_file(shot(&shots, view, width));
        }
    }

    browser_script(
        &node,
        &node.url("/"),
        "console.test.mjs",
        &[
            ("CONSOLE_TOKEN", OsStr::new(TOKEN)),
            ("UPLOAD_WASM", upload.as_os_str()),
            ("UPLOAD_PROTOCOL", protocol.as_os_str()),
            ("BROKEN_WASM", broken.as_os_str()),
            ("SHOTS_DIR", shots.as_os_str()),
        ],
    );
    for view in VIEWS {
        for width in WIDTHS {
            let path = shot(&shots, view, width);
            assert!(path.exists(), "{} was not written", path.display());
        }
    }
}
