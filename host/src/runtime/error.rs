//! Why the runtime could not do what it was asked: load a plugin file
//! ([`LoadError`], shown in `/health`), answer a call ([`InvokeError`], mapped
//! by each transport to its wire shape) or run a tool for a plugin
//! ([`ToolError`], returned to the calling plugin as text).
//!
//! [`InvokeError`] lives in [`crate::vocab`] because metrics label by it too,
//! and metrics sit below the runtime.

use std::path::PathBuf;

pub use crate::vocab::InvokeError;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("no tool named {0:?} is loaded")]
    Unknown(String),
    #[error("tool {tool} is not allowed: {reason}")]
    NotAllowed { tool: String, reason: String },
    #[error("tool calls nest deeper than {0}")]
    TooDeep(u32),
    #[error("tool {0} needs a human's approval and this exchange has no human to ask")]
    NoApprover(String),
    #[error("tool {tool} was rejected{}", feedback.as_ref().map(|f| format!(": {f}")).unwrap_or_default())]
    Rejected { tool: String, feedback: Option<String> },
    #[error("approval of tool {0} timed out")]
    ApprovalTimedOut(String),
    #[error("tool {tool} needs a human's approval and {why}; try again later")]
    TooManyWaiting { tool: String, why: String },
    #[error("tool {tool} failed: {message}")]
    Failed { tool: String, message: String },
    #[error("the node is shutting down")]
    ShuttingDown,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is {size} bytes, over the {limit}-byte limit")]
    TooLarge { path: PathBuf, size: u64, limit: u64 },
    #[error("{path} is not a regular file (a FIFO, device, socket or folder); only regular files are loaded")]
    NotAFile { path: PathBuf },
    #[error("{path} is not a valid plugin component: {message}")]
    Compile { path: PathBuf, message: String },
    #[error("{path}: invalid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("{0}")]
    Conflict(String),
}
