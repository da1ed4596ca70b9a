//! The set of loaded plugins and the routes they claim.
//!
//! A registry is immutable: a reload builds a new one and swaps it in
//! atomically, so a request holds the snapshot it started with and finishes on
//! the version it began on. Two plugins claiming one route is an error that
//! names both; the plugin already serving keeps the route.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::LoadedPlugin;

#[derive(Default)]
pub struct Registry {
    /// Loaded plugins by file.
    plugins: BTreeMap<PathBuf, Arc<LoadedPlugin>>,
    /// Route (`kind:key`) → the plugin serving it.
    routes: HashMap<String, Arc<LoadedPlugin>>,
}

impl Registry {
    pub fn plugins(&self) -> impl Iterator<Item = &Arc<LoadedPlugin>> {
        self.plugins.values()
    }

    pub fn by_file(&self, file: &Path) -> Option<&Arc<LoadedPlugin>> {
        self.plugins.get(file)
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.plugins.values().find(|p| p.manifest.name == name)
    }

    fn route(&self, route: &str) -> Option<&Arc<LoadedPlugin>> {
        self.routes.get(route)
    }

    /// The plugin serving an Agora protocol document by its hex SHA1.
    pub fn agora_protocol(&self, hash_hex: &str) -> Option<&Arc<LoadedPlugin>> {
        self.route(&format!("agora:{hash_hex}"))
    }
    pub fn agora_default(&self) -> Option<&Arc<LoadedPlugin>> {
        self.route("agora:default")
    }
    pub fn agora_any_document(&self) -> Option<&Arc<LoadedPlugin>> {
        self.route("agora:any-document")
    }
    pub fn envelope_resource(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.route(&format!("envelope:{name}"))
    }
    pub fn uagents_model(&self, digest: &str) -> Option<&Arc<LoadedPlugin>> {
        self.route(&format!("uagents:{digest}"))
    }
    pub fn arena_league(&self, league: &str) -> Option<&Arc<LoadedPlugin>> {
        self.route(&format!("arena:{league}"))
    }
    pub fn hai_assistant(&self) -> Option<&Arc<LoadedPlugin>> {
        self.route("hai:assistant")
    }
    pub fn tool(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.route(&format!("tool:{name}"))
    }
    /// The plugin rendering the prompt `name` (names are unique across plugins, as tools').
    pub fn prompt(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.route(&format!("prompt:{name}"))
    }

    /// A registry with `plugin` added (or replacing the one loaded from the same file).
    /// Fails, naming both plugins, when it claims a route another plugin serves.
    pub fn with(&self, plugin: Arc<LoadedPlugin>) -> Result<Registry, String> {
        let mut plugins = self.plugins.clone();
        plugins.remove(&plugin.file);
        for route in claims(&plugin) {
            if let Some(other) = plugins.values().find(|p| claims(p).contains(&route)) {
                return Err(format!(
                    "route {route} is claimed by both {} ({}) and {} ({})",
                    other.manifest.name,
                    other.file.display(),
                    plugin.manifest.name,
                    plugin.file.display()
                ));
            }
        }
        if let Some(other) = plugins.values().find(|p| p.manifest.name == plugin.manifest.name) {
            return Err(format!(
                "plugin name {} is used by both {} and {}",
                plugin.manifest.name,
                other.file.display(),
                plugin.file.display()
            ));
        }
        plugins.insert(plugin.file.clone(), plugin);
        Ok(Self::from_plugins(plugins))
    }

    /// A registry without the plugin loaded from `file`.
    pub fn without(&self, file: &Path) -> Registry {
        let mut plugins = self.plugins.clone();
        plugins.remove(file);
        Self::from_plugins(plugins)
    }

    fn from_plugins(plugins: BTreeMap<PathBuf, Arc<LoadedPlugin>>) -> Registry {
        let mut routes = HashMap::new();
        for plugin in plugins.values() {
            for route in claims(plugin) {
                routes.insert(route, plugin.clone());
            }
        }
        Registry { plugins, routes }
    }
}

/// Every route `plugin` claims: its manifest's, and its prompts' (declared in its capabilities).
pub(super) fn claims(plugin: &LoadedPlugin) -> Vec<String> {
    let mut routes = plugin.manifest.routes();
    routes.extend(
        plugin
            .capabilities
            .prompts
            .iter()
            .map(|prompt| format!("prompt:{}", prompt.name)),
    );
    routes
}
