//! `agora-node plugin new NAME`: a plugin crate that builds and loads as is.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error("plugin name {0:?} must be lower-case letters, digits and '-', starting with a letter")]
    InvalidName(String),
    #[error("{0} already exists")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("language {0:?} is not supported yet (rust is)")]
    Language(String),
}

/// Where the SDK lives relative to this binary's source tree.
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

pub fn new_plugin(name: &str, parent: &Path, lang: &str) -> Result<PathBuf, ScaffoldError> {
    if lang != "rust" {
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
    let in_workspace = enclosing_workspace(parent);
    let sdk = match &in_workspace {
        Some(root) => pathdiff(
            &root.join("plugin-sdk"),
            &std::path::absolute(&dir).unwrap_or(dir.clone()),
        ),
        None => std::path::absolute(sdk_dir()).unwrap_or_else(|_| sdk_dir()),
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
    let document = format!(
        "name: {name}\ndescription: Replace with what this protocol does.\nmultiround: false\n---\nThe request body is {{\"text\": string}}.\nThe response body is {{\"reply\": string}}.\n"
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
        reply(json!({{"reply": format!("you said: {{}}", request.text)}}))
    }}
}}

export_plugin!(Handler);
"#
    );
    let readme = format!(
        "# {name}\n\nBuild: `cargo build --profile plugin --target wasm32-wasip2` (in the node's workspace, `agora-node dev` rebuilds it on save).\nCopy `{wasm}.wasm` into the node's plugins folder; the node loads it within a second.\n",
        wasm = name.replace('-', "_")
    );
    for (path, text) in [
        (dir.join("Cargo.toml"), cargo),
        (dir.join("protocol.md"), document),
        (dir.join("src/lib.rs"), lib),
        (dir.join("README.md"), readme),
    ] {
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
    Ok(dir)
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
