//! `agora-node plugin new NAME --lang rust|python|js`: a plugin that builds
//! with one command and loads as is. Python and JavaScript plugins carry a copy
//! of the node's WIT (`wit/agora-node.wit`, and the WASI packages it names in
//! `wit/deps/`) for their component toolchain (componentize-py,
//! componentize-js), and in `bindings/` the typed bindings generated from it
//! (`plugin-sdk/bindings`, embedded in this binary) with the SDK's small helper
//! module.

use std::path::{Path, PathBuf};

use include_dir::{Dir, include_dir};

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error("plugin name {0:?} must be lower-case letters, digits and '-', starting with a letter")]
    InvalidName(String),
    #[error("{0} already exists")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("language {0:?} is not supported (rust, python and js are)")]
    Language(String),
    #[error("cannot edit {path}: {reason}")]
    Manifest { path: PathBuf, reason: String },
}

/// Where the SDK lives relative to this binary's source tree.
#[cfg(test)]
fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk")
}

/// The workspace root above `dir`, if it is this project's (it has `plugin-sdk/`).
fn enclosing_workspace(dir: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(dir).ok()?;
    absolute
        .ancestors()
        .find(|a| a.join("plugin-sdk/Cargo.toml").exists() && a.join("Cargo.toml").exists())
        .map(Path::to_path_buf)
}

/// The node's WIT world (its package line names the contract).
const WIT: &str = include_str!("../../plugin-sdk/wit/agora-node.wit");

/// The node's WIT folder: `agora-node.wit` and, in `deps/`, the WASI packages
/// the world `agent-http` names; copied into Python and JavaScript plugins and
/// the vendored SDK, whose toolchains read the whole folder.
static WIT_DIR: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../plugin-sdk/wit");

/// Every file of the WIT folder, under `prefix` (e.g. `wit`).
fn wit_files(prefix: &str) -> Vec<(String, String)> {
    text_files(&WIT_DIR)
        .into_iter()
        .map(|(path, text)| (format!("{prefix}/{path}"), text))
        .collect()
}

/// componentize-py's bindings of the world plus `agora_plugin.py`.
static PYTHON_BINDINGS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../plugin-sdk/bindings/python");

/// jco's TypeScript declarations of the world plus `agora-plugin.js`.
static JS_BINDINGS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../plugin-sdk/bindings/js");

/// Every text file of an embedded bindings folder, under `bindings/`.
fn bindings(dir: &'static Dir<'static>) -> Vec<(String, String)> {
    text_files(dir)
        .into_iter()
        .map(|(path, text)| (format!("bindings/{path}"), text))
        .collect()
}

/// Every text file of an embedded folder by its path in it (Python caches left out).
fn text_files(dir: &'static Dir<'static>) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut folders = vec![dir];
    while let Some(folder) = folders.pop() {
        folders.extend(folder.dirs().filter(|d| !d.path().ends_with("__pycache__")));
        for file in folder.files() {
            if let Some(text) = file.contents_utf8() {
                files.push((file.path().display().to_string(), text.to_string()));
            }
        }
    }
    files.sort();
    files
}

/// The plugin contract this binary speaks and scaffolds: the SDK's version
/// and the WIT package (`agora:node@0.1.0`).
pub fn plugin_contract() -> String {
    let wit = WIT
        .lines()
        .find_map(|line| line.trim().strip_prefix("package "))
        .map_or("unknown", |package| package.trim_end_matches(';').trim());
    let sdk = standalone_sdk_manifest()
        .ok()
        .and_then(|manifest| manifest.parse::<toml_edit::DocumentMut>().ok())
        .and_then(|manifest| Some(manifest.get("package")?.get("version")?.as_str()?.to_string()))
        .unwrap_or_else(|| "unknown".to_string());
    format!("plugin SDK {sdk}, WIT {wit}")
}

/// The one command that builds a scaffolded plugin of `lang` (run in its folder).
pub fn build_line(lang: &str, name: &str) -> String {
    match lang {
        "python" => "pip install -r requirements.txt && ./build.sh".to_string(),
        "js" | "javascript" => "npm install && npm run build".to_string(),
        _ => format!("cargo build --profile plugin --target wasm32-wasip2 -p {name}"),
    }
}

pub fn new_plugin(name: &str, parent: &Path, lang: &str) -> Result<PathBuf, ScaffoldError> {
    if !matches!(lang, "rust" | "python" | "js" | "javascript") {
        return Err(ScaffoldError::Language(lang.to_string()));
    }
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.len() <= 48;
    if !valid {
        return Err(ScaffoldError::InvalidName(name.to_string()));
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir));
    }
    let files = match lang {
        "python" => Some(python_files(name)),
        "js" | "javascript" => Some(javascript_files(name)),
        _ => None,
    };
    if let Some(files) = files {
        let created = write_files(&dir, files)?;
        // A folder with no Cargo.toml under the workspace's `plugins/*` glob would break
        // every cargo command: keep it out of the workspace.
        if let Some(root) = enclosing_workspace(parent) {
            exclude_from_workspace(&root, &created)?;
        }
        return Ok(created);
    }
    let in_workspace = enclosing_workspace(parent);
    let (sdk, vendored) = match &in_workspace {
        Some(root) => (
            pathdiff(
                &root.join("plugin-sdk"),
                &std::path::absolute(&dir).unwrap_or(dir.clone()),
            ),
            Vec::new(),
        ),
        None => (
            PathBuf::from(VENDORED_SDK),
            vendored_sdk().map_err(|reason| ScaffoldError::Manifest {
                path: dir.join(VENDORED_SDK).join("Cargo.toml"),
                reason,
            })?,
        ),
    };
    let standalone = if in_workspace.is_some() {
        ""
    } else {
        "\n# A workspace of its own, outside the node's source tree.\n[workspace]\n\n# What `agora-node dev` builds with.\n[profile.plugin]\ninherits = \"release\"\nstrip = true\n"
    };
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
agora-plugin-sdk = {{ path = "{sdk}" }}
serde = {{ version = "1", features = ["derive"] }}
{standalone}"#,
        sdk = sdk.display()
    );
    let lib = format!(
        r#"//! The {name} plugin: serves `protocol.md` over Agora.

use agora_plugin_sdk::prelude::*;

struct Handler;

#[derive(Deserialize)]
struct Request {{
    text: String,
}}

impl Plugin for Handler {{
    fn manifest() -> Manifest {{
        Manifest::new("{name}", env!("CARGO_PKG_VERSION")).protocol(include_str!("../protocol.md"))
    }}

    fn handle(message: Message) -> Result<String, Failure> {{
        let request: Request = message.json()?;
        // A setting of this plugin: `[plugins.{name}.config] greeting = "…"` in the node's
        // configuration (secrets: `[plugins.{name}.secrets]`); a change applies without a restart.
        let greeting = host::config_get("greeting")?.unwrap_or_else(|| "you said".to_string());
        reply(json!({{"reply": format!("{{greeting}}: {{}}", request.text)}}))
    }}
}}

export_plugin!(Handler);
"#
    );
    let readme = format!(
        "# {name}\n\nBuild: `cargo build --profile plugin --target wasm32-wasip2` (in the node's workspace, `agora-node dev` rebuilds it on save).\nCopy `{wasm}.wasm` into the node's plugins folder; the node loads it within a second.\n{vendor}",
        wasm = name.replace('-', "_"),
        vendor = if in_workspace.is_some() {
            String::new()
        } else {
            format!(
                "\n`{VENDORED_SDK}` is the node's plugin SDK, copied from the `agora-node` binary that scaffolded this plugin;\n`Cargo.lock` pins the versions that node was built with.\n"
            )
        }
    );
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo),
        ("protocol.md".to_string(), echo_document(name)),
        ("src/lib.rs".to_string(), lib),
        ("README.md".to_string(), readme),
    ];
    files.extend(vendored);
    write_files(&dir, files)
}

/// Where a plugin scaffolded outside the node's source tree keeps its copy of the SDK.
const VENDORED_SDK: &str = "vendor/agora-plugin-sdk";

/// The SDK's sources, its manifest and the workspace's lock file, embedded so a
/// plugin scaffolded anywhere builds with the SDK (and the dependency versions)
/// this node was built and tested with.
static SDK_SOURCES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../plugin-sdk/src");
const SDK_MANIFEST: &str = include_str!("../../plugin-sdk/Cargo.toml");
const WORKSPACE_MANIFEST: &str = include_str!("../../Cargo.toml");
const WORKSPACE_LOCK: &str = include_str!("../../Cargo.lock");

/// The files of a standalone plugin's vendored SDK, and its `Cargo.lock`
/// (cargo drops the entries the plugin does not use).
fn vendored_sdk() -> Result<Vec<(String, String)>, String> {
    let mut files = vec![
        (format!("{VENDORED_SDK}/Cargo.toml"), standalone_sdk_manifest()?),
        ("Cargo.lock".to_string(), WORKSPACE_LOCK.to_string()),
    ];
    files.extend(wit_files(&format!("{VENDORED_SDK}/wit")));
    for (path, text) in text_files(&SDK_SOURCES) {
        files.push((format!("{VENDORED_SDK}/src/{path}"), text));
    }
    Ok(files)
}

/// The SDK's manifest with what it inherits from the node's workspace
/// (`edition.workspace = true`, `serde.workspace = true`) written out.
fn standalone_sdk_manifest() -> Result<String, String> {
    use toml_edit::{DocumentMut, Item};
    let parse = |text: &str| text.parse::<DocumentMut>().map_err(|e| e.to_string());
    let workspace = parse(WORKSPACE_MANIFEST)?;
    let shared = |section: &str, key: &str| {
        workspace
            .get("workspace")
            .and_then(|w| w.get(section))
            .and_then(|s| s.get(key))
            .ok_or_else(|| format!("the workspace does not define {section}.{key}"))
    };
    let mut sdk = parse(SDK_MANIFEST)?;
    let inherited = |item: &Item| item.get("workspace").and_then(Item::as_bool) == Some(true);
    if let Some(package) = sdk.get_mut("package").and_then(Item::as_table_like_mut) {
        for (key, item) in package.iter_mut() {
            if inherited(item) {
                *item = shared("package", key.get())?.clone();
            }
        }
    }
    for section in ["dependencies", "build-dependencies", "dev-dependencies"] {
        let Some(dependencies) = sdk.get_mut(section).and_then(Item::as_table_like_mut) else {
            continue;
        };
        for (name, item) in dependencies.iter_mut() {
            if !inherited(item) {
                continue;
            }
            let shared = shared("dependencies", name.get())?;
            let mut dependency = match shared.as_value() {
                Some(toml_edit::Value::InlineTable(table)) => table.clone(),
                Some(version) => {
                    let mut table = toml_edit::InlineTable::new();
                    table.insert("version", version.clone());
                    table
                }
                None => return Err(format!("workspace.dependencies.{} is not inline", name.get())),
            };
            // What the member adds to the shared dependency (features add up).
            if let Some(own) = item.as_table_like() {
                for (key, value) in own.iter().filter(|(key, _)| *key != "workspace") {
                    let Some(value) = value.as_value() else { continue };
                    let features = dependency
                        .get_mut("features")
                        .and_then(toml_edit::Value::as_array_mut);
                    match (key, features, value.as_array()) {
                        ("features", Some(features), Some(more)) => features.extend(more.iter().cloned()),
                        _ => {
                            dependency.insert(key, value.clone());
                        }
                    }
                }
            }
            dependency.fmt();
            *item = toml_edit::value(dependency);
        }
    }
    // The node's lint policy is the node's: a plugin author's build of the
    // vendored SDK is not held to it (and has no workspace to inherit it from).
    sdk.remove("lints");
    Ok(sdk.to_string())
}

/// Add `dir` to the `exclude` list of the workspace at `root`.
fn exclude_from_workspace(root: &Path, dir: &Path) -> Result<(), ScaffoldError> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(|source| ScaffoldError::Write {
        path: manifest.clone(),
        source,
    })?;
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let relative = absolute.strip_prefix(root).unwrap_or(&absolute);
    // Cargo reads `/` on every platform.
    let entry = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    let invalid = |reason: String| ScaffoldError::Manifest {
        path: manifest.clone(),
        reason,
    };
    if let Some(updated) = with_excluded(&text, &entry).map_err(invalid)? {
        std::fs::write(&manifest, updated).map_err(|source| ScaffoldError::Write {
            path: manifest.clone(),
            source,
        })?;
    }
    Ok(())
}

/// `manifest` with `entry` added to `[workspace] exclude` (the table and the
/// list created when missing), its comments and layout kept; `None` when the
/// entry is already there. A new entry of a multi-line list goes on a line of
/// its own, indented like the one before it.
fn with_excluded(manifest: &str, entry: &str) -> Result<Option<String>, String> {
    let mut document: toml_edit::DocumentMut = manifest.parse().map_err(|e| format!("not TOML: {e}"))?;
    let workspace = document
        .entry("workspace")
        .or_insert(toml_edit::table())
        .as_table_like_mut()
        .ok_or("`workspace` is not a table")?;
    let exclude = workspace
        .entry("exclude")
        .or_insert(toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or("`workspace.exclude` is not a list")?;
    if exclude.iter().any(|item| item.as_str() == Some(entry)) {
        return Ok(None);
    }
    let own_line = exclude
        .iter()
        .last()
        .map(|item| item.decor().clone())
        .filter(|decor| {
            decor
                .prefix()
                .and_then(|p| p.as_str())
                .is_some_and(|p| p.contains('\n'))
        });
    exclude.push(entry);
    if let (Some(decor), Some(added)) = (own_line, exclude.iter_mut().last()) {
        *added.decor_mut() = decor;
    }
    Ok(Some(document.to_string()))
}

fn write_files<P: AsRef<Path>>(dir: &Path, files: Vec<(P, String)>) -> Result<PathBuf, ScaffoldError> {
    for (relative, text) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ScaffoldError::Write {
                path: parent.into(),
                source,
            })?;
        }
        std::fs::write(&path, text).map_err(|source| ScaffoldError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(dir.to_path_buf())
}

fn echo_document(name: &str) -> String {
    format!(
        "name: {name}\ndescription: Replace with what this protocol does.\nmultiround: false\n---\nThe request body is {{\"text\": string}}.\nThe response body is {{\"reply\": string}}.\n"
    )
}

/// A componentize-py plugin for the world `agent-http` (`agent`, with the
/// wasi:http bindings `agora_plugin.http_get` uses): the same echo handler as
/// the Rust scaffold, reading the same setting, and no capabilities yet.
fn python_files(name: &str) -> Vec<(String, String)> {
    let wasm = name.replace('-', "_");
    let app = format!(
        r#""""The {name} plugin: serves protocol.md over Agora, in Python.

Types: bindings/ holds the node's WIT world `agent-http` as Python (generated
by componentize-py, which builds with its own identical copy) and agora_plugin,
the SDK's helpers.
"""

import json

import wit_world
from wit_world import exports
from wit_world.imports import types

import agora_plugin
from document import DOCUMENT


class WitWorld(wit_world.WitWorld):
    def manifest(self) -> types.Manifest:
        return agora_plugin.manifest("{name}", "0.1.0", protocols=[DOCUMENT])

    @agora_plugin.handler
    def handle(self, message: types.Message) -> str:
        request = agora_plugin.json_object(message.body)
        if request is None or not isinstance(request.get("text"), str):
            raise agora_plugin.bad_request('the body must be {{"text": string}}')
        # A setting of this plugin: `[plugins.{name}.config] greeting = "…"` in the node's
        # configuration (secrets: `[plugins.{name}.secrets]`); a change applies without a restart.
        greeting = agora_plugin.config_get("greeting") or "you said"
        return json.dumps({{"reply": f"{{greeting}}: {{request['text']}}"}})

    def run_tool(self, name: str, arguments: str) -> str:
        raise agora_plugin.unknown_tool(name)


class Extensions(exports.Extensions):
    """What the plugin asks of the node beyond answering messages: nothing yet.
    `agora_plugin.capabilities(llm=["default"], schedules={{"poll": "30s"}})` asks for
    the node's language model (`agora_plugin.complete(agora_plugin.ChatRequest().user(…))`,
    `agora_plugin.model_ready()` first says whether the node has one) and a schedule, run by
    `tick` (`agora_plugin.dispatch_tick(name, {{"poll": poll}})`);
    `allowed_hosts=["https://api.example.org"]` lets `agora_plugin.http_get(url)` reach that
    origin when the node's `outbound.allowed_hosts` lists it too."""

    def capabilities(self) -> str:
        return agora_plugin.capabilities()

    def tick(self, name: str) -> None:
        agora_plugin.dispatch_tick(name, {{}})


# The prompts MCP clients are offered: none yet. Declare them in `capabilities`
# (`prompts=[agora_plugin.prompt("greet", "…", [("who", "…", True)])]`) and render them
# with a `class Prompts(exports.Prompts)` whose `get` returns
# `agora_plugin.dispatch_prompt(name, arguments, {{"greet": greet}})`.
Prompts = agora_plugin.NoPrompts
"#
    );
    let build = format!(
        r#"#!/usr/bin/env bash
# Builds dist/{wasm}.wasm with componentize-py (COMPONENTIZE_PY overrides which one).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build dist
# The protocol document, byte for byte: the component has no files at run time.
python3 -c 'import pathlib; pathlib.Path("build/document.py").write_text("DOCUMENT = %r\n" % pathlib.Path("protocol.md").read_bytes().decode("utf-8"), encoding="utf-8")'
# World `agent-http`: `agent` with wasi:http's bindings; the node's `types` keeps its name.
"${{COMPONENTIZE_PY:-componentize-py}}" -d wit -w agent-http --import-interface-name agora:node/types@0.1.0=types \
  componentize -p . -p bindings -p build app -o dist/{wasm}.wasm
"#
    );
    let readme = format!(
        "# {name}

A Python plugin for Agora Node (componentize-py 0.25).

Build: `{build}` (in a virtualenv; `agora-node dev` rebuilds it on save).
Copy `dist/{wasm}.wasm` into the node's plugins folder; the node loads it within a second.
Types: `bindings/` holds the node's WIT world (`agent-http`: `agent` with wasi:http) as typed
Python (`wit_world`) and the SDK's helpers (`agora_plugin`); `pyrightconfig.json` points editors at them.
Settings: `agora_plugin.config_get(\"greeting\")` reads `[plugins.{name}.config]` of the node's
configuration; `Extensions.capabilities` declares a language model, schedules and the origins
`agora_plugin.http_get` may reach (the node's `outbound.allowed_hosts` must list them too).
",
        build = build_line("python", name)
    );
    let mut files = vec![
        ("app.py".to_string(), app),
        ("build.sh".to_string(), build),
        (
            "requirements.txt".to_string(),
            "componentize-py==0.25.1\n".to_string(),
        ),
        ("protocol.md".to_string(), echo_document(name)),
        (
            "pyrightconfig.json".to_string(),
            "{\n  \"extraPaths\": [\"bindings\", \"build\"]\n}\n".to_string(),
        ),
        (
            ".gitignore".to_string(),
            "build/\ndist/\n__pycache__/\n".to_string(),
        ),
        ("README.md".to_string(), readme),
    ];
    files.extend(wit_files("wit"));
    files.extend(bindings(&PYTHON_BINDINGS));
    files
}

/// A componentize-js plugin for the world `agent`, built with `fetch()` (its
/// `http` feature): the same echo handler as the Rust scaffold, reading the
/// same setting, and no capabilities yet.
fn javascript_files(name: &str) -> Vec<(String, String)> {
    let wasm = name.replace('-', "_");
    let plugin = format!(
        r#"// The {name} plugin: serves protocol.md over Agora, in JavaScript.
// Types: bindings/ declares the node's WIT world (world `agent`, generated by
// jco) beside agora-plugin.js, the SDK's helpers; `npm run check` type-checks.

import {{
  badRequest,
  capabilities,
  configGet,
  dispatchTick,
  jsonObject,
  manifest as manifestOf,
  noPrompts,
  unknownTool,
}} from "../bindings/agora-plugin.js";
import {{ DOCUMENT }} from "../build/document.js";

/** @typedef {{import("agora:node/agent@0.1.0").Manifest}} Manifest */
/** @typedef {{import("agora:node/agent@0.1.0").Message}} Message */

/** @returns {{Manifest}} */
export function manifest() {{
  return manifestOf({{ name: "{name}", version: "0.1.0", protocols: [DOCUMENT] }});
}}

/** @param {{Message}} message @returns {{string}} */
export function handle(message) {{
  const request = jsonObject(message.body);
  if (request === null || typeof request.text !== "string") {{
    throw badRequest('the body must be {{"text": string}}');
  }}
  // A setting of this plugin: `[plugins.{name}.config] greeting = "…"` in the node's
  // configuration (secrets: `[plugins.{name}.secrets]`); a change applies without a restart.
  const greeting = configGet("greeting") ?? "you said";
  return JSON.stringify({{ reply: `${{greeting}}: ${{request.text}}` }});
}}

/** @param {{string}} name @param {{string}} _arguments @returns {{string}} */
export function runTool(name, _arguments) {{
  throw unknownTool(name);
}}

// What the plugin asks of the node beyond answering messages: nothing yet.
// `capabilities({{ llm: ["default"], schedules: {{ poll: "30s" }} }})` asks for the node's language
// model (`complete(new ChatRequest().user(…))`; `modelReady()` first says whether the node has one)
// and a schedule, run by `tick` (`dispatchTick(name, {{ poll }})`);
// `allowedHosts: ["https://api.example.org"]` lets `fetch()` reach that origin when the node's
// `outbound.allowed_hosts` lists it too (an export may be an `async function` to await it).
export const extensions = {{
  /** @returns {{string}} */
  capabilities: () => capabilities({{}}),
  /** @param {{string}} name @returns {{void}} */
  tick: (name) => dispatchTick(name, {{}}),
}};

// The prompts MCP clients are offered: none yet. Declare them in `capabilities`
// (`prompts: [prompt("greet", "…", [["who", "…", true]])]`) and render them with
// `{{ get: (name, args) => dispatchPrompt(name, args, {{ greet }}) }}` here.
export const prompts = noPrompts;
"#
    );
    let generate = r#"// Embeds protocol.md, byte for byte: the component has no files at run time.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";

const text = readFileSync(new URL("./protocol.md", import.meta.url), "utf8");
mkdirSync(new URL("./build/", import.meta.url), { recursive: true });
mkdirSync(new URL("./dist/", import.meta.url), { recursive: true });
writeFileSync(new URL("./build/document.js", import.meta.url), `export const DOCUMENT = ${JSON.stringify(text)};
`);
"#
    .to_string();
    let package = format!(
        r#"{{
  "name": "{name}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "scripts": {{
    "build": "node gen-document.mjs && componentize-js src/plugin.js --wit wit --world-name agent --disable fetch-event -o dist/{wasm}.wasm",
    "check": "node gen-document.mjs && tsc --noEmit"
  }},
  "devDependencies": {{
    "@bytecodealliance/componentize-js": "0.23.0",
    "@bytecodealliance/preview2-shim": "0.25.0",
    "typescript": "7.0.2"
  }}
}}
"#
    );
    let tsconfig = r#"{
  "compilerOptions": {
    "allowJs": true,
    "checkJs": true,
    "noEmit": true,
    "strict": true,
    "target": "es2022",
    "module": "esnext",
    "moduleResolution": "bundler",
    "lib": ["es2022", "esnext.disposable", "webworker"],
    "types": []
  },
  "include": ["src", "bindings", "build"]
}
"#
    .to_string();
    let readme = format!(
        "# {name}

A JavaScript plugin for Agora Node (componentize-js).

Build: `{build}` (`agora-node dev` rebuilds it on save).
Copy `dist/{wasm}.wasm` into the node's plugins folder; the node loads it within a second.
Types: `bindings/` declares the node's WIT world (`agent`) in TypeScript (`*.d.ts`) beside the
SDK's helpers (`agora-plugin.js`); `npm run check` type-checks `src/` against them.
Settings: `configGet(\"greeting\")` reads `[plugins.{name}.config]` of the node's configuration;
`extensions.capabilities` declares a language model, schedules and the origins `fetch()` may reach
(the node's `outbound.allowed_hosts` must list them too).
",
        build = build_line("js", name)
    );
    let mut files = vec![
        ("src/plugin.js".to_string(), plugin),
        ("gen-document.mjs".to_string(), generate),
        ("package.json".to_string(), package),
        ("tsconfig.json".to_string(), tsconfig),
        ("protocol.md".to_string(), echo_document(name)),
        (
            ".gitignore".to_string(),
            "build/\ndist/\nnode_modules/\n".to_string(),
        ),
        ("README.md".to_string(), readme),
    ];
    files.extend(wit_files("wit"));
    files.extend(bindings(&JS_BINDINGS));
    files
}

/// `target` relative to `base` (both absolute).
fn pathdiff(target: &Path, base: &Path) -> PathBuf {
    let target: Vec<_> = target.components().collect();
    let base: Vec<_> = base.components().collect();
    let common = target.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut relative = PathBuf::new();
    for _ in common..base.len() {
        relative.push("..");
    }
    for component in &target[common..] {
        relative.push(component);
    }
    relative
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdk_file(relative: &str) -> String {
        std::fs::read_to_string(sdk_dir().join("bindings").join(relative)).unwrap()
    }

    #[test]
    fn python_and_js_plugins_carry_the_sdks_bindings_byte_for_byte() {
        let parent = tempfile::tempdir().unwrap();
        let samples = [
            (
                "python",
                [
                    "wit_world/__init__.py",
                    "wit_world/imports/types.py",
                    "wit_world/exports/__init__.py",
                    "agora_plugin.py",
                ],
            ),
            (
                "js",
                [
                    "agent.d.ts",
                    "interfaces/agora-node-types.d.ts",
                    "interfaces/agora-node-llm.d.ts",
                    "agora-plugin.js",
                ],
            ),
        ];
        for (lang, files) in samples {
            let plugin = new_plugin(&format!("demo-{lang}"), parent.path(), lang).unwrap();
            for relative in files {
                let written = std::fs::read_to_string(plugin.join("bindings").join(relative)).unwrap();
                assert_eq!(written, sdk_file(&format!("{lang}/{relative}")), "{relative}");
            }
        }
        let app = std::fs::read_to_string(parent.path().join("demo-python/app.py")).unwrap();
        assert!(app.contains("from wit_world.imports import types"), "{app}");
        assert!(parent.path().join("demo-js/tsconfig.json").is_file());
    }

    #[test]
    fn python_and_js_plugins_are_built_for_the_agent_world_and_read_a_setting() {
        let parent = tempfile::tempdir().unwrap();
        let python = new_plugin("demo-py", parent.path(), "python").unwrap();
        let read = |path: PathBuf| std::fs::read_to_string(path).unwrap();
        let app = read(python.join("app.py"));
        for expected in [
            r#"greeting = agora_plugin.config_get("greeting") or "you said""#,
            r#"f"{greeting}: {request['text']}""#,
            "[plugins.demo-py.config]",
            "class Extensions(exports.Extensions):",
            "return agora_plugin.capabilities()",
        ] {
            assert!(app.contains(expected), "{expected} in {app}");
        }
        let build = read(python.join("build.sh"));
        assert!(
            build.contains(" -w agent-http --import-interface-name agora:node/types@0.1.0=types "),
            "{build}"
        );
        // The world names wasi:http: its WIT comes along, or no toolchain reads the folder.
        for wit in ["wit/agora-node.wit", "wit/deps/http.wit", "wit/deps/io.wit"] {
            assert!(python.join(wit).is_file(), "{wit}");
        }
        let js = new_plugin("demo-js", parent.path(), "js").unwrap();
        let plugin = read(js.join("src/plugin.js"));
        for expected in [
            r#"const greeting = configGet("greeting") ?? "you said";"#,
            "reply: `${greeting}: ${request.text}`",
            "[plugins.demo-js.config]",
            "export const extensions = {",
            r#"import("agora:node/agent@0.1.0").Message"#,
        ] {
            assert!(plugin.contains(expected), "{expected} in {plugin}");
        }
        // `fetch()` built in (componentize-js's `http`), incoming `fetch` events not.
        let package = read(js.join("package.json"));
        assert!(
            package.contains(" --world-name agent --disable fetch-event -o "),
            "{package}"
        );
        assert!(js.join("wit/deps/http.wit").is_file());
        // jco's declarations of the world's resources need the disposable types; `fetch`'s
        // are the web worker's.
        let tsconfig = read(js.join("tsconfig.json"));
        assert!(
            tsconfig.contains(r#""esnext.disposable", "webworker""#),
            "{tsconfig}"
        );
    }

    #[test]
    fn workspace_exclude_is_added_to_an_inline_list() {
        let manifest =
            "# the workspace\n[workspace]\nmembers = [\"host\"]\nexclude = [\"plugins/js\"] # scripted\n";
        assert_eq!(
            with_excluded(manifest, "plugins/py").unwrap().unwrap(),
            "# the workspace\n[workspace]\nmembers = [\"host\"]\nexclude = [\"plugins/js\", \"plugins/py\"] # scripted\n"
        );
    }

    #[test]
    fn workspace_exclude_is_added_to_a_multi_line_list_on_its_own_line() {
        let manifest = "[workspace]\nexclude = [\n    \"plugins/js\",\n    \"plugins/ts\",\n]\nmembers = [\"host\"]\n\n[profile.dev]\nopt-level = 1\n";
        let updated = with_excluded(manifest, "plugins/py").unwrap().unwrap();
        assert_eq!(
            updated,
            "[workspace]\nexclude = [\n    \"plugins/js\",\n    \"plugins/ts\",\n    \"plugins/py\",\n]\nmembers = [\"host\"]\n\n[profile.dev]\nopt-level = 1\n"
        );
        assert_eq!(with_excluded(&updated, "plugins/py").unwrap(), None, "added once");
    }

    #[test]
    fn workspace_exclude_is_created_when_missing() {
        let manifest =
            "[workspace]\nmembers = [\"host\", \"plugins/*\"]\n\n[workspace.package]\nedition = \"2024\"\n";
        let updated = with_excluded(manifest, "plugins/py").unwrap().unwrap();
        assert_eq!(
            updated,
            "[workspace]\nmembers = [\"host\", \"plugins/*\"]\nexclude = [\"plugins/py\"]\n\n[workspace.package]\nedition = \"2024\"\n"
        );
        let parsed: toml_edit::DocumentMut = updated.parse().unwrap();
        assert_eq!(parsed["workspace"]["exclude"][0].as_str(), Some("plugins/py"));
        assert!(with_excluded("workspace = 3\n", "x").is_err());
        assert!(with_excluded("[workspace\n", "x").is_err());
    }

    #[test]
    fn the_vendored_sdk_inherits_nothing_from_the_workspace() {
        let manifest: toml_edit::DocumentMut = standalone_sdk_manifest().unwrap().parse().unwrap();
        let workspace: toml_edit::DocumentMut = WORKSPACE_MANIFEST.parse().unwrap();
        assert!(!manifest.to_string().contains("workspace"), "{manifest}");
        for key in ["edition", "version", "license"] {
            assert_eq!(
                manifest["package"][key].as_str(),
                workspace["workspace"]["package"][key].as_str(),
                "{key}"
            );
        }
        assert_eq!(manifest["package"]["name"].as_str(), Some("agora-plugin-sdk"));
        assert_eq!(manifest["dependencies"]["serde"]["version"].as_str(), Some("1"));
        assert_eq!(
            manifest["dependencies"]["serde"]["features"][0].as_str(),
            Some("derive")
        );
        assert_eq!(
            manifest["dependencies"]["serde_json"]["version"].as_str(),
            Some("1")
        );
        assert!(manifest["dependencies"]["wit-bindgen"].is_inline_table());
        let files = vendored_sdk().unwrap();
        let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        for expected in [
            "vendor/agora-plugin-sdk/src/lib.rs",
            "vendor/agora-plugin-sdk/wit/agora-node.wit",
            "vendor/agora-plugin-sdk/wit/deps/http.wit",
            "Cargo.lock",
        ] {
            assert!(names.contains(&expected), "{names:?}");
        }
    }
}
