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
//! `tests/browser/console-shots/` (for docs/). The Fleet view is shown on a
//! two-node fleet on PostgreSQL by `tests/browser/console-fleet.test.mjs`.

use std::ffi::OsStr;
use std::path::Path;

use agora_test_postgres::Postgres;

use crate::console::{TOKEN, assistant_node};
use crate::hai::browser_script;
use crate::host::versioned_build;
use crate::support::{self, TestNode};

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

/// Two nodes on one database: A follows the fleet's plugin set (one build of
/// the versioned fixture), B serves its own folder with another build. A's
/// console lists both with their heartbeats, and B stands out.
#[test]
fn the_console_shows_every_node_of_the_fleet_and_the_one_that_differs() {
    let database = Postgres::shared().create_database();
    let fleet_node = |env: &[(&str, &str)]| {
        TestNode::builder()
            .on_database(&database)
            .env("AGORA_CONSOLE__TOKEN", TOKEN)
            .envs(env)
            .start()
    };
    let a = fleet_node(&[]);
    let b = fleet_node(&[("AGORA_PLUGINS__FLEET", "false")]);
    support::install_bytes(&a.plugins_dir, "versioned", &versioned_build(1));
    support::install_bytes(&b.plugins_dir, "versioned", &versioned_build(2));
    a.wait_for_log("published to the fleet");
    let shots = support::repo_root().join(SHOTS_DIR);
    for width in WIDTHS {
        let _ = std::fs::remove_file(shot(&shots, "fleet", width));
    }
    browser_script(
        &a,
        &a.url("/"),
        "console-fleet.test.mjs",
        &[
            ("CONSOLE_TOKEN", OsStr::new(TOKEN)),
            ("FLEET_NODES", OsStr::new("2")),
            ("DIFFERING_FILE", OsStr::new("versioned.wasm")),
            ("SHOTS_DIR", shots.as_os_str()),
        ],
    );
    for width in WIDTHS {
        let path = shot(&shots, "fleet", width);
        assert!(path.exists(), "{} was not written", path.display());
    }
}
