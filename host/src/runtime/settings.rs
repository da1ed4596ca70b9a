//! Each plugin's settings (`[plugins.NAME.config]`, `[plugins.NAME.secrets]`),
//! read through `host.config-get`.
//!
//! Settings are swapped whole when the configuration file changes
//! ([`crate::node`] watches it), so a call sees one consistent version and the
//! next call the new one, without a restart. A secret is read from its
//! environment variable or file when the plugin asks — a rotated file is seen
//! at once, and the value lives in the node only while a call that read it
//! does — and every secret a call read is redacted from what the node prints
//! of that call: its log lines, its stdout and stderr, its failure messages.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::config::{PluginSettings, SecretSource};

/// A secret file larger than this is refused rather than read whole.
const MAX_SECRET_BYTES: u64 = 64 * 1024;
/// What a secret's value is replaced with in the node's output.
pub(crate) const REDACTED: &str = "[redacted]";

/// Every plugin's settings, by plugin name.
#[derive(Default)]
pub(crate) struct Settings {
    by_plugin: RwLock<Arc<BTreeMap<String, PluginSettings>>>,
}

/// A value `config-get` answers, and whether it is a secret (to be redacted).
pub(crate) struct SettingValue {
    pub(crate) text: String,
    pub(crate) secret: bool,
}

impl Settings {
    pub(crate) fn new(by_plugin: BTreeMap<String, PluginSettings>) -> Settings {
        Settings {
            by_plugin: RwLock::new(Arc::new(by_plugin)),
        }
    }

    /// Swap in new settings; the plugins whose settings changed, to log.
    pub(crate) fn replace(&self, next: BTreeMap<String, PluginSettings>) -> Vec<String> {
        let mut current = self.by_plugin.write();
        let changed = current
            .keys()
            .chain(next.keys())
            .filter(|name| current.get(*name) != next.get(*name))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        *current = Arc::new(next);
        changed
    }

    /// The value of `key` for `plugin`: its config first, then its secrets.
    pub(crate) fn get(&self, plugin: &str, key: &str) -> Result<Option<SettingValue>, String> {
        let settings = self.by_plugin.read().clone();
        let Some(settings) = settings.get(plugin) else {
            return Ok(None);
        };
        if let Some(value) = settings.config.get(key) {
            let text = match value {
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            return Ok(Some(SettingValue { text, secret: false }));
        }
        let Some(source) = settings.secrets.get(key) else {
            return Ok(None);
        };
        let text = read_secret(source)
            .map_err(|reason| format!("secret {key:?} of plugin {plugin} cannot be read: {reason}"))?;
        Ok(Some(SettingValue { text, secret: true }))
    }
}

/// A secret's value. Errors name where it was looked for, never what it holds.
fn read_secret(source: &SecretSource) -> Result<String, String> {
    match source {
        SecretSource::Env(name) => {
            std::env::var(name).map_err(|_| format!("the environment variable {name} is not set"))
        }
        SecretSource::File(path) => {
            let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut bytes = Vec::new();
            file.take(MAX_SECRET_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if bytes.len() as u64 > MAX_SECRET_BYTES {
                return Err(format!("{} is over {MAX_SECRET_BYTES} bytes", path.display()));
            }
            let text =
                String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
            // Files written by `echo` or editors end with a newline that is no part of a token.
            Ok(text.trim_end_matches(['\n', '\r']).to_string())
        }
    }
}

/// `text` with every secret in `secrets` replaced by [`REDACTED`].
pub(crate) fn redact<'a>(text: &'a str, secrets: &[String]) -> std::borrow::Cow<'a, str> {
    let mut text = std::borrow::Cow::Borrowed(text);
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if text.contains(secret.as_str()) {
            text = std::borrow::Cow::Owned(text.replace(secret.as_str(), REDACTED));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let mut one = PluginSettings::default();
        one.config.insert("feed".into(), serde_json::json!("https://x"));
        one.config.insert("interval".into(), serde_json::json!(30));
        one.secrets.insert(
            "missing".into(),
            SecretSource::Env("PLUGIN_TEST_UNSET_VARIABLE".into()),
        );
        Settings::new(BTreeMap::from([("feeder".to_string(), one)]))
    }

    #[test]
    fn values_are_text_and_unknown_keys_are_none() {
        let settings = settings();
        assert_eq!(settings.get("feeder", "feed").unwrap().unwrap().text, "https://x");
        assert_eq!(settings.get("feeder", "interval").unwrap().unwrap().text, "30");
        assert!(settings.get("feeder", "nothing").unwrap().is_none());
        assert!(settings.get("other", "feed").unwrap().is_none());
    }

    #[test]
    fn an_unreadable_secret_names_its_source_not_a_value() {
        let error = settings().get("feeder", "missing").err().unwrap();
        assert!(error.contains("PLUGIN_TEST_UNSET_VARIABLE"), "{error}");
    }

    #[test]
    fn a_secret_file_is_read_when_asked_and_its_newline_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let mut one = PluginSettings::default();
        one.secrets
            .insert("token".into(), SecretSource::File(path.clone()));
        let settings = Settings::new(BTreeMap::from([("p".to_string(), one)]));
        std::fs::write(&path, "s3cret\n").unwrap();
        let value = settings.get("p", "token").unwrap().unwrap();
        assert!(value.secret);
        assert_eq!(value.text, "s3cret");
        std::fs::write(&path, "rotated").unwrap();
        assert_eq!(settings.get("p", "token").unwrap().unwrap().text, "rotated");
    }

    #[test]
    fn replacing_reports_the_plugins_that_changed() {
        let settings = settings();
        assert_eq!(settings.replace(BTreeMap::new()), vec!["feeder".to_string()]);
        assert!(settings.replace(BTreeMap::new()).is_empty());
    }

    #[test]
    fn secrets_are_redacted_wherever_they_stand() {
        let secrets = vec!["tok-123".to_string(), String::new()];
        assert_eq!(
            redact("a tok-123 b tok-123", &secrets),
            "a [redacted] b [redacted]"
        );
        assert!(matches!(
            redact("nothing", &secrets),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
