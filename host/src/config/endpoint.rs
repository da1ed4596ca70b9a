//! What every transport's section has in common — whether it is served,
//! where it listens and the path its routes start at — as one view, so
//! validation and the node's mounting read every transport the same way
//! (`crate::transports::TRANSPORTS` lists them).

use super::{ConfigError, invalid, parse_listen};

/// A section's [`Endpoint`] from its `enabled`, `listen` and (unless the
/// protocol fixes its paths) `path` keys, named `<section>.listen` and `<section>.path`.
macro_rules! endpoint_of {
    ($section:literal, $config:expr) => {
        $crate::config::Endpoint {
            protocol: $section,
            enabled: $config.enabled,
            listen: (concat!($section, ".listen"), &$config.listen),
            path: Some((concat!($section, ".path"), &$config.path)),
        }
    };
    ($section:literal, $config:expr, fixed_paths) => {
        $crate::config::Endpoint {
            protocol: $section,
            enabled: $config.enabled,
            listen: (concat!($section, ".listen"), &$config.listen),
            path: None,
        }
    };
}
pub(super) use endpoint_of;

/// One transport's place on the node, read from its section.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    /// The protocol's name: its section's, and its label in the console's charts.
    pub protocol: &'static str,
    pub enabled: bool,
    /// Its own listener (its key, its value); an empty value shares the node's `listen`.
    pub listen: (&'static str, &'a str),
    /// The path its routes start at (its key, its value); `None` where the protocol fixes its paths.
    pub path: Option<(&'static str, &'a str)>,
}

impl Endpoint<'_> {
    /// A listen address that parses, and a path that is an absolute URL path.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (listen_key, listen) = self.listen;
        if !listen.is_empty() {
            parse_listen(listen_key, listen)?;
        }
        if let Some((path_key, path)) = self.path
            && (!path.starts_with('/') || path.contains(char::is_whitespace))
        {
            return Err(invalid(
                path_key,
                format!("{path:?} must be an absolute URL path"),
            ));
        }
        Ok(())
    }
}
