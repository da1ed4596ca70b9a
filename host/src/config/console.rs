//! `[console]`: the operator's console (`crate::console`), a JSON API under
//! its own path on the node's shared listener.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, invalid};

/// The operator's console; `config/agora.toml` explains each key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    pub enabled: bool,
    /// Where its routes start, on the node's shared listener.
    pub path: String,
    /// What every console request presents as `Authorization: Bearer <token>`;
    /// empty: the console is off and none of its paths exist.
    pub token: String,
}

/// Paths the node serves on its shared listener whatever the transports say.
const FIXED_PATHS: [&str; 2] = ["/health", "/metrics"];

impl ConsoleConfig {
    /// Whether the node serves the console: enabled, and with a token to ask for.
    pub fn is_served(&self) -> bool {
        self.enabled && !self.token.is_empty()
    }

    /// An absolute path other than `/`, clear of every path another endpoint
    /// serves on the shared listener (a clash would fail the node's routing, or
    /// hide one of the two).
    pub(super) fn validate(&self, node: &Config) -> Result<(), ConfigError> {
        let path = self.path.trim_end_matches('/');
        if !self.path.starts_with('/') || path.is_empty() || self.path.contains(char::is_whitespace) {
            return Err(invalid(
                "console.path",
                format!("{:?} must be an absolute URL path other than \"/\"", self.path),
            ));
        }
        for (key, other) in shared_listener_paths(node) {
            if overlaps(path, other.trim_end_matches('/')) {
                return Err(invalid(
                    "console.path",
                    format!(
                        "{:?} clashes with {key} ({other:?}) on the shared listener",
                        self.path
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Whether one path is the other or lies under it (`/a2a` and `/a2a/console`).
fn overlaps(one: &str, other: &str) -> bool {
    let under = |inner: &str, outer: &str| {
        inner == outer
            || (!outer.is_empty()
                && inner
                    .strip_prefix(outer)
                    .is_some_and(|rest| rest.starts_with('/')))
    };
    under(one, other) || under(other, one)
}

/// The paths served on the node's shared listener besides the console's: the
/// fixed ones, and each enabled transport's that has no listener of its own.
fn shared_listener_paths(node: &Config) -> Vec<(&'static str, &str)> {
    let endpoints = node.endpoints();
    let shares = |listen: &str| listen.is_empty() || listen == node.listen;
    let mut paths: Vec<(&'static str, &str)> = FIXED_PATHS.iter().map(|path| ("the node", *path)).collect();
    paths.extend(
        endpoints
            .iter()
            .filter(|endpoint| endpoint.enabled && shares(endpoint.listen.1))
            .filter_map(|endpoint| endpoint.path),
    );
    paths
}

#[cfg(test)]
mod tests {
    use super::super::tests::with;
    use super::*;

    #[test]
    fn the_console_is_off_until_a_token_is_set() {
        let defaults = Config::defaults();
        assert_eq!(defaults.console.path, "/console");
        assert!(!defaults.console.is_served(), "no token by default");
        assert!(with("[console]\ntoken = \"t\"").unwrap().console.is_served());
        assert!(
            !with("[console]\ntoken = \"t\"\nenabled = false")
                .unwrap()
                .console
                .is_served()
        );
    }

    #[test]
    fn the_console_path_is_absolute_not_the_root_and_clashes_with_nothing() {
        for (path, why) in [
            ("console", "absolute"),
            ("/", "other than"),
            ("/a2a", "a2a.path"),
            ("/a2a/console", "a2a.path"),
            ("/mcp", "mcp.path"),
            ("/ws", "hai.path"),
            ("/health", "the node"),
        ] {
            let refused = with(&format!("[console]\npath = {path:?}"))
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains("console.path") && refused.contains(why),
                "{path}: {refused}"
            );
        }
        with("[console]\npath = \"/a2a-console\"").unwrap();
        // A transport on a listener of its own, or not served, leaves its path free.
        with("[console]\npath = \"/mcp\"\n[mcp]\nenabled = false").unwrap();
        with("[console]\npath = \"/a2a\"\n[a2a]\nlisten = \"127.0.0.1:9999\"").unwrap();
    }
}
