//! `[tools]`: which tool calls need a human's approval, and how long and how
//! many of them may wait.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, all_positive, invalid};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Tools at or above this risk need a human's approval: low, medium, high, critical.
    pub approval_threshold: String,
    pub approval_timeout_ms: u64,
    /// Calls one caller (client address or token) may park waiting for approvals.
    pub max_waiting_approvals_per_client: usize,
    /// Calls one transport's callers may park waiting for approvals, together.
    pub max_waiting_approvals_per_transport: usize,
}

impl ToolsConfig {
    pub(super) fn validate(&self, _node: &Config) -> Result<(), ConfigError> {
        all_positive(&[
            (
                "tools.max_waiting_approvals_per_client",
                self.max_waiting_approvals_per_client as u64,
            ),
            (
                "tools.max_waiting_approvals_per_transport",
                self.max_waiting_approvals_per_transport as u64,
            ),
        ])?;
        if crate::vocab::Risk::parse(&self.approval_threshold).is_none() {
            return Err(invalid(
                "tools.approval_threshold",
                "must be one of low, medium, high, critical",
            ));
        }
        Ok(())
    }
}
