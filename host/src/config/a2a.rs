//! `[a2a]`: Agent2Agent 1.0 over JSON-RPC (`transports::a2a`).

use serde::{Deserialize, Serialize};

use super::endpoint::endpoint_of;
use super::{Config, ConfigError, Endpoint, all_positive, check_origins, invalid};

/// Agent2Agent 1.0 (JSON-RPC binding); `config/agora.toml` explains each key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aConfig {
    pub enabled: bool,
    pub listen: String,
    /// The JSON-RPC endpoint.
    pub path: String,
    /// The HTTP+JSON binding's base path; empty: that binding is not served.
    pub rest_path: String,
    /// Base URL clients reach the node at; empty: the first public host, else the listen address.
    pub public_url: String,
    /// Browser origins allowed to call besides the node's own.
    pub allowed_origins: Vec<String>,
    pub name: String,
    pub description: String,
    /// Plugin answering A2A messages; empty: the HAI assistant.
    pub default_plugin: String,
    /// When not empty, `POST {path}` requires `Authorization: Bearer <this>`.
    pub auth_token: String,
    pub max_body_bytes: usize,
    pub max_parts_per_message: usize,
    pub max_tasks_per_context: usize,
    /// Bytes of tasks one `ListTasks` page holds (past its first task).
    pub max_list_bytes: usize,
    pub max_running_tasks: usize,
    pub max_running_tasks_per_ip: usize,
    pub new_tasks_per_ip_per_minute: u32,
    pub stream_idle_timeout_ms: u64,
    pub task_ttl_secs: u64,
    pub max_history_entries: usize,
    /// Tasks one client address may have stored (live within `task_ttl_secs`).
    pub max_stored_tasks_per_client: u64,
    /// Bytes of stored tasks one client address may have.
    pub max_stored_task_bytes_per_client: u64,
    /// Bytes of stored tasks of every client together.
    pub max_stored_task_bytes: u64,
    /// Push notifications: the config CRUD methods and deliveries (the card's `pushNotifications`).
    pub push_enabled: bool,
    /// A webhook must be in `outbound.allowed_hosts`; false: an unlisted public one (or one
    /// in `outbound.allowed_private`) is allowed too.
    pub push_allowed_hosts_only: bool,
    pub push_max_configs_per_task: usize,
    pub push_max_configs_per_client: u64,
    /// The first retry's delay, doubled per attempt up to `push_retry_max_interval_ms`.
    pub push_retry_initial_ms: u64,
    pub push_retry_max_interval_ms: u64,
    /// A delivery not accepted this long after it was owed is dropped.
    pub push_retry_for_ms: u64,
    /// Deliveries owed at once, in the whole store; beyond, new ones are dropped.
    pub push_max_pending: usize,
    /// Deliveries this node attempts at once.
    pub push_max_concurrent: usize,
}

impl A2aConfig {
    /// Whether the HTTP+JSON binding is served.
    pub fn serves_rest(&self) -> bool {
        !self.rest_path.is_empty()
    }

    /// An absolute path (as `a2a.path`), not the JSON-RPC endpoint's: the two
    /// bindings cannot share a route.
    fn validate_rest_path(&self) -> Result<(), ConfigError> {
        if !self.serves_rest() {
            return Ok(());
        }
        let rest = self.rest_path.trim_end_matches('/');
        if !self.rest_path.starts_with('/') || self.rest_path.contains(char::is_whitespace) {
            return Err(invalid(
                "a2a.rest_path",
                format!("{:?} must be an absolute URL path, or empty", self.rest_path),
            ));
        }
        if rest.is_empty() || rest == self.path.trim_end_matches('/') {
            return Err(invalid(
                "a2a.rest_path",
                "must not be \"/\" nor a2a.path: the HTTP+JSON binding needs a path of its own",
            ));
        }
        Ok(())
    }

    /// Backoff that grows: the first retry within the longest interval, and
    /// that within the time a delivery is retried for.
    fn validate_push_retry(&self) -> Result<(), ConfigError> {
        if self.push_retry_initial_ms > self.push_retry_max_interval_ms {
            return Err(invalid(
                "a2a.push_retry_initial_ms",
                "must not exceed a2a.push_retry_max_interval_ms",
            ));
        }
        if self.push_retry_max_interval_ms > self.push_retry_for_ms {
            return Err(invalid(
                "a2a.push_retry_max_interval_ms",
                "must not exceed a2a.push_retry_for_ms",
            ));
        }
        Ok(())
    }

    /// Where this transport is served.
    pub fn endpoint(&self) -> Endpoint<'_> {
        endpoint_of!("a2a", self)
    }

    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        self.endpoint().validate()?;
        self.validate_rest_path()?;
        check_origins("a2a.allowed_origins", &self.allowed_origins)?;
        all_positive(&[
            ("a2a.max_body_bytes", self.max_body_bytes as u64),
            ("a2a.max_parts_per_message", self.max_parts_per_message as u64),
            ("a2a.max_tasks_per_context", self.max_tasks_per_context as u64),
            ("a2a.max_list_bytes", self.max_list_bytes as u64),
            ("a2a.max_running_tasks", self.max_running_tasks as u64),
            (
                "a2a.max_running_tasks_per_ip",
                self.max_running_tasks_per_ip as u64,
            ),
            (
                "a2a.new_tasks_per_ip_per_minute",
                u64::from(self.new_tasks_per_ip_per_minute),
            ),
            ("a2a.stream_idle_timeout_ms", self.stream_idle_timeout_ms),
            ("a2a.task_ttl_secs", self.task_ttl_secs),
            ("a2a.max_history_entries", self.max_history_entries as u64),
            (
                "a2a.max_stored_tasks_per_client",
                self.max_stored_tasks_per_client,
            ),
            (
                "a2a.max_stored_task_bytes_per_client",
                self.max_stored_task_bytes_per_client,
            ),
            ("a2a.max_stored_task_bytes", self.max_stored_task_bytes),
            (
                "a2a.push_max_configs_per_task",
                self.push_max_configs_per_task as u64,
            ),
            (
                "a2a.push_max_configs_per_client",
                self.push_max_configs_per_client,
            ),
            ("a2a.push_retry_initial_ms", self.push_retry_initial_ms),
            ("a2a.push_retry_max_interval_ms", self.push_retry_max_interval_ms),
            ("a2a.push_retry_for_ms", self.push_retry_for_ms),
            ("a2a.push_max_pending", self.push_max_pending as u64),
            ("a2a.push_max_concurrent", self.push_max_concurrent as u64),
        ])?;
        self.validate_push_retry()?;
        if !self.public_url.is_empty() {
            let parsed =
                url::Url::parse(&self.public_url).map_err(|e| invalid("a2a.public_url", e.to_string()))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(invalid("a2a.public_url", "must be an http:// or https:// URL"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::with;

    #[test]
    fn the_rest_path_is_absolute_its_own_or_empty() {
        for (path, why) in [
            ("rest", "absolute"),
            ("/a b", "absolute"),
            ("/", "a path of its own"),
            ("/a2a/", "a path of its own"),
        ] {
            let refused = with(&format!("[a2a]\nrest_path = {path:?}"))
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains("a2a.rest_path") && refused.contains(why),
                "{path}: {refused}"
            );
        }
        assert!(with("").unwrap().a2a.serves_rest());
        assert!(!with("[a2a]\nrest_path = \"\"").unwrap().a2a.serves_rest());
        with("[a2a]\nrest_path = \"/agent/http\"").unwrap();
    }

    #[test]
    fn push_retries_back_off_within_their_bounds() {
        for (toml, key) in [
            ("push_retry_initial_ms = 0", "a2a.push_retry_initial_ms"),
            ("push_retry_initial_ms = 70000", "a2a.push_retry_initial_ms"),
            ("push_retry_for_ms = 1000", "a2a.push_retry_max_interval_ms"),
            ("push_max_configs_per_task = 0", "a2a.push_max_configs_per_task"),
        ] {
            let refused = with(&format!("[a2a]\n{toml}")).unwrap_err().to_string();
            assert!(refused.contains(key), "{toml}: {refused}");
        }
        assert!(with("").unwrap().a2a.push_enabled);
    }
}
