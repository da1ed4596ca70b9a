//! The crate's layers hold: no module under `host/src` uses a module in its
//! own or a higher layer (see the table in `host/src/lib.rs`).
//!
//! Read from the source rather than from the compiler, so it runs in a moment:
//! every `crate::` path (in `use` lines, grouped `use crate::{a, b::c}` trees
//! and inline paths) and every `super::` chain that climbs to the crate root is
//! resolved to the layer entry it names, comments and string literals excepted.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers, bottom first. An entry is a top-level module or, when a part of
/// one sits lower than the rest, that part's path (`node::state`); a file or a
/// path belongs to the longest entry that is a prefix of it.
const LAYERS: &[&[&str]] = &[
    &["vocab", "jsonrpc", "background", "models"],
    &["crypto", "logging"],
    &["config"],
    &["store", "metrics"],
    &["peers", "policy"],
    &["runtime"],
    &["listener"],
    &["node::state"],
    &["transports"],
    &["health", "console"],
    &["node"],
    &["cli", "dev", "scaffold"],
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_uses_one_in_its_own_or_a_higher_layer() {
    let mut violations = String::new();
    let mut checked = 0;
    for file in rust_files(&src_dir()) {
        let relative = file.strip_prefix(src_dir()).unwrap_or(&file).to_path_buf();
        let Some(module) = module_path(&relative) else {
            continue; // lib.rs and main.rs sit above every layer.
        };
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let own =
            entry_of(&module).unwrap_or_else(|| panic!("{} is in no layer of LAYERS", relative.display()));
        for reference in references(&text, &module) {
            checked += 1;
            let Some(target) = entry_of(&reference.path) else {
                let _ = writeln!(
                    violations,
                    "host/src/{}:{}: `crate::{}` is in no layer of LAYERS",
                    relative.display(),
                    reference.line,
                    reference.path.join("::")
                );
                continue;
            };
            if target.entry == own.entry || is_inside(&reference.path, own.entry) {
                continue;
            }
            if target.layer >= own.layer {
                let _ = writeln!(
                    violations,
                    "host/src/{}:{}: `{}` (layer {}) uses `{}` (layer {}); a module may use only lower layers",
                    relative.display(),
                    reference.line,
                    own.entry,
                    own.layer,
                    target.entry,
                    target.layer
                );
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} references found: is the scanner broken?"
    );
    assert!(violations.is_empty(), "upward dependencies:\n{violations}");
}

#[test]
fn every_module_of_the_crate_has_a_layer() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs");
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';').to_string())
        .collect();
    let tops: Vec<&str> = LAYERS
        .iter()
        .flat_map(|layer| layer.iter())
        .map(|entry| entry.split("::").next().unwrap_or(entry))
        .collect();
    for module in &declared {
        assert!(
            tops.contains(&module.as_str()),
            "`{module}` (lib.rs) is in no layer of LAYERS"
        );
    }
    for top in &tops {
        assert!(
            declared.iter().any(|m| m == top),
            "LAYERS names `{top}`, which lib.rs does not declare"
        );
    }
}

#[test]
fn the_table_in_lib_rs_is_this_one() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs");
    let documented: Vec<Vec<String>> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//! | "))
        .filter(|row| row.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|row| {
            let modules = row.split('|').nth(1).unwrap_or_default();
            modules
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect();
    let expected: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|layer| layer.iter().map(|m| m.to_string()).collect())
        .collect();
    assert_eq!(
        documented, expected,
        "the layer table in lib.rs and LAYERS disagree"
    );
}

/// The scanner itself: each way of naming a module is found, and comments,
/// strings and `super::` that stays inside the module are not (seen from
/// `config/mod.rs`, where a file-level `super::` is the crate root).
#[test]
fn references_are_found_in_every_form() {
    let text = r#####"
use crate::config::Config;
use crate::{store::{self, Store}, metrics};
pub(crate) fn f() -> u64 { crate::vocab::now() }
// crate::transports in a comment
/* crate::node
   in a block */
const S: &str = "crate::health";
const R: &str = r#"crate::cli "quoted" "#;
fn g<'a>(c: char, b: u8) -> bool { c == '{' || c == '"' || b == b'"' || c == '\u{7b}' }
use super::sibling;
mod tests {
    use super::*;
    use super::super::peers::x;
}
"#####;
    let found: Vec<(String, usize)> = references(text, &["config".to_string()])
        .into_iter()
        .map(|r| (r.path.join("::"), r.line))
        .collect();
    assert_eq!(
        found,
        [
            ("config::Config".to_string(), 2),
            ("store::self".to_string(), 3),
            ("store::Store".to_string(), 3),
            ("metrics".to_string(), 3),
            ("vocab::now".to_string(), 4),
            ("sibling".to_string(), 11),
            ("peers::x".to_string(), 14),
        ]
    );
}

struct Entry {
    entry: &'static str,
    layer: usize,
}

/// The longest entry of LAYERS that `path` starts with.
fn entry_of(path: &[String]) -> Option<Entry> {
    let mut best: Option<Entry> = None;
    for (layer, entries) in LAYERS.iter().enumerate() {
        for entry in entries.iter() {
            let longer = best.as_ref().is_none_or(|b| entry.len() > b.entry.len());
            if is_inside(path, entry) && longer {
                best = Some(Entry { entry, layer });
            }
        }
    }
    best
}

fn is_inside(path: &[String], entry: &str) -> bool {
    let parts: Vec<&str> = entry.split("::").collect();
    path.len() >= parts.len() && parts.iter().zip(path).all(|(a, b)| a == b)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// `runtime/loader.rs` → `runtime::loader`; `runtime/mod.rs` → `runtime`.
fn module_path(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    match parts.as_slice() {
        [only] if only == "lib" || only == "main" => None,
        _ => Some(parts),
    }
}

struct Reference {
    /// The path after `crate::`, one entry per segment.
    path: Vec<String>,
    line: usize,
}

/// Every path into the crate named in `text`, the source of `module`.
fn references(text: &str, module: &[String]) -> Vec<Reference> {
    let code = blank_comments_and_strings(text);
    let bytes = code.as_bytes();
    let line_at = |offset: usize| code[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut inline_mods: Vec<(String, usize)> = Vec::new(); // (name, brace depth inside it)
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == b'}' {
            if inline_mods.last().is_some_and(|(_, d)| *d == depth) {
                inline_mods.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if !is_ident_start(c) || (i > 0 && (is_ident_char(bytes[i - 1]) || bytes[i - 1] == b'$')) {
            i += 1;
            continue;
        }
        let word_end = ident_end(bytes, i);
        let word = &code[i..word_end];
        if word == "mod" {
            let name_start = skip_space(bytes, word_end);
            let name_end = ident_end(bytes, name_start);
            let after = skip_space(bytes, name_end);
            if name_end > name_start && bytes.get(after) == Some(&b'{') {
                inline_mods.push((code[name_start..name_end].to_string(), depth + 1));
            }
            i = name_end.max(word_end);
            continue;
        }
        if word == "crate" && code[word_end..].starts_with("::") {
            for path in use_tree(&code, word_end + 2) {
                found.push(Reference {
                    path,
                    line: line_at(i),
                });
            }
            i = word_end;
            continue;
        }
        if word == "super" && code[word_end..].starts_with("::") {
            let mut climbs = 0;
            let mut at = i;
            while code[at..].starts_with("super::") {
                climbs += 1;
                at += "super::".len();
            }
            let mut here: Vec<String> = module.to_vec();
            here.extend(inline_mods.iter().map(|(name, _)| name.clone()));
            if climbs >= here.len() {
                // Climbed to the crate root: what follows names a top-level module.
                for path in use_tree(&code, at) {
                    found.push(Reference {
                        path,
                        line: line_at(i),
                    });
                }
            }
            i = at;
            continue;
        }
        i = word_end;
    }
    found
}

/// The paths of a use tree (or plain path) starting at `start`, flattened:
/// `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`.
fn use_tree(code: &str, start: usize) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut prefix = Vec::new();
    let mut at = skip_space(bytes, start);
    loop {
        if bytes.get(at) == Some(&b'{') {
            let mut paths = Vec::new();
            let mut item_start = at + 1;
            let mut nesting = 0;
            let mut j = at + 1;
            while j < bytes.len() {
                match bytes[j] {
                    b'{' => nesting += 1,
                    b'}' if nesting == 0 => break,
                    b'}' => nesting -= 1,
                    b',' if nesting == 0 => {
                        paths.extend(item_paths(code, &prefix, item_start));
                        item_start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            paths.extend(item_paths(code, &prefix, item_start));
            return paths;
        }
        let end = ident_end(bytes, at);
        if end == at {
            return if prefix.is_empty() {
                Vec::new()
            } else {
                vec![prefix]
            };
        }
        prefix.push(code[at..end].to_string());
        let next = skip_space(bytes, end);
        if code[next..].starts_with("::") {
            at = skip_space(bytes, next + 2);
        } else {
            return vec![prefix];
        }
    }
}

fn item_paths(code: &str, prefix: &[String], start: usize) -> Vec<Vec<String>> {
    use_tree(code, start)
        .into_iter()
        .map(|tail| prefix.iter().cloned().chain(tail).collect())
        .collect()
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_end(bytes: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < bytes.len() && is_ident_char(bytes[end]) {
        end += 1;
    }
    end
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && bytes[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// `text` with comments, string and character literals replaced by spaces
/// (newlines kept, so offsets still give line numbers).
fn blank_comments_and_strings(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(bytes.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let mut nesting = 0;
            let mut j = i;
            loop {
                if j + 1 >= bytes.len() {
                    break bytes.len();
                }
                if bytes[j] == b'/' && bytes[j + 1] == b'*' {
                    nesting += 1;
                    j += 2;
                } else if bytes[j] == b'*' && bytes[j + 1] == b'/' {
                    nesting -= 1;
                    j += 2;
                    if nesting == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if let Some(end) = raw_string_end(bytes, i) {
            end
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if bytes[i] == b'\'' {
            char_literal_end(bytes, i).unwrap_or(i + 1)
        } else {
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end.max(i + 1);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// End of a raw string `r#"…"#` (or `br"…"`) starting at `i`, if one does.
fn raw_string_end(bytes: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_ident_char(bytes[i - 1]) {
        return None;
    }
    let mut j = i;
    if bytes.get(j) == Some(&b'b') {
        j += 1;
    }
    if bytes.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = bytes[j..].iter().take_while(|&&b| b == b'#').count();
    j += hashes;
    if bytes.get(j) != Some(&b'"') {
        return None;
    }
    let mut closing = vec![b'"'];
    closing.extend(std::iter::repeat_n(b'#', hashes));
    let body = j + 1;
    bytes[body..]
        .windows(closing.len())
        .position(|window| window == closing.as_slice())
        .map(|at| body + at + closing.len())
}

/// End of a character literal at `i` (`'a'`, `'\n'`, `'\u{1F600}'`); `None`
/// for a lifetime or label.
fn char_literal_end(bytes: &[u8], i: usize) -> Option<usize> {
    if bytes.get(i + 1) == Some(&b'\\') {
        let close = bytes[i + 2..].iter().position(|&b| b == b'\'')?;
        return Some(i + 2 + close + 1);
    }
    // One character, possibly several bytes of UTF-8, then the closing quote.
    let width = match bytes.get(i + 1)? {
        b if *b < 0x80 => 1,
        b if *b >= 0xF0 => 4,
        b if *b >= 0xE0 => 3,
        _ => 2,
    };
    (bytes.get(i + 1 + width) == Some(&b'\'')).then_some(i + 2 + width)
}
