//! Tool calls from plugins (`host.call-tool`): approval by risk, the tool
//! plugin's `run-tool` in an exchange of its own ([`Exchange::nested`]), and
//! the lifecycle the caller's consumer sees as `tool_call` events.
//!
//! A name `<server>/<tool>` whose server is in `[mcp.servers]` is a tool of
//! that MCP server ([`crate::peers::mcp`]), whatever plugin tool has the same
//! name: the operator named that server explicitly, and a plugin loaded later
//! must not be able to take its calls. Such a tool must be on the server's
//! allow-list before the server is asked anything; its risk comes from the
//! server's annotations of it, and approval follows from that risk exactly as
//! for a plugin's tool.
//!
//! The lifecycle is a [`ToolStage`] value at every step, serialised once when
//! it is sent: a tool that needs approval and is refused (no approver, no
//! parking place, rejected, timed out) goes straight to `failed`; otherwise it
//! is `started`, then `completed` or `failed`. HAI checks that order
//! (`transports::hai::turn`), so a plugin cannot fake these events.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::approval::Approver;
use super::approval::{ApprovalOutcome, ApprovalRequest};
use super::exchange::Exchange;
use super::instance::{self, CallSlot};
use super::manifest::ToolSpec;
use super::{InvokeError, LoadedPlugin, Risk, Runtime, ToolError};
use crate::peers::mcp::{McpClientError, RemoteServer};
use crate::policy::admission::Refusal;
use crate::vocab::{ToolLifecycle, ToolStage};

/// The identity of one tool call: what every lifecycle event of it carries.
struct ToolCall<'a> {
    call_id: String,
    tool_name: &'a str,
    risk: Risk,
    exchange: &'a Exchange,
}

impl<'a> ToolCall<'a> {
    fn new(tool_name: &'a str, risk: Risk, exchange: &'a Exchange) -> ToolCall<'a> {
        ToolCall {
            call_id: uuid::Uuid::new_v4().to_string(),
            tool_name,
            risk,
            exchange,
        }
    }

    async fn send(&self, stage: ToolStage) {
        let lifecycle = ToolLifecycle {
            call_id: self.call_id.clone(),
            tool_name: self.tool_name.to_string(),
            risk: self.risk,
            stage,
        };
        // A consumer that has gone or stalls does not change the tool's outcome.
        let _ = self.exchange.send_lifecycle(lifecycle).await;
    }

    async fn failed(&self, error: impl Into<String>) {
        self.send(ToolStage::Failed { error: error.into() }).await;
    }

    /// No place for this call to wait for its approval: it fails before anything is asked.
    async fn too_many_waiting(&self, why: String) -> ToolError {
        self.failed(ToolStage::NO_APPROVAL_PLACE).await;
        ToolError::TooManyWaiting {
            tool: self.tool_name.to_string(),
            why,
        }
    }
}

/// What stands between a call and its tool: nothing (its risk needs no
/// approval), a human to ask, or a decision a human already took about this
/// very call ([`super::approval::Redeemed`]).
enum Gate {
    Open,
    Ask(Arc<dyn Approver>),
    Decided(ApprovalOutcome),
}

impl From<Option<Arc<dyn Approver>>> for Gate {
    fn from(approver: Option<Arc<dyn Approver>>) -> Gate {
        approver.map_or(Gate::Open, Gate::Ask)
    }
}

/// What a tool name resolves to: its spec (risk, description) and what runs it.
struct ResolvedTool {
    spec: ToolSpec,
    target: ToolTarget,
}

/// Where a tool runs.
enum ToolTarget {
    /// A loaded plugin's `run-tool`.
    Plugin(Arc<LoadedPlugin>),
    /// `tools/call` of a configured MCP server, by the tool's name there.
    Remote { server: Arc<RemoteServer>, tool: String },
}

impl Runtime {
    /// Run a tool for a plugin call: lifecycle events, approval by risk, then
    /// the tool plugin's `run-tool` (in a fresh instance, or a warm one if its
    /// manifest asks) in an exchange of its own ([`Exchange::nested`]).
    ///
    /// The caller is parked meanwhile (its `slot` given up) when a parking place
    /// is free; a tool that needs an approval and finds none fails at once, as
    /// does one whose caller or transport holds its share of the approvals
    /// ([`super::approval`]).
    pub(crate) async fn run_tool(
        &self,
        name: &str,
        arguments: Value,
        caller: &Exchange,
        slot: &mut CallSlot,
    ) -> Result<String, ToolError> {
        let host = &self.inner.host;
        if caller.tool_depth >= host.config.max_tool_depth {
            return Err(ToolError::TooDeep(host.config.max_tool_depth));
        }
        let tool = self.resolve_tool(name).await?;
        let call = ToolCall::new(name, tool.spec.risk, caller);
        let approver = self.approver_for(&call).await?;
        let place = host.park_place();
        if let Some(approver) = &approver
            && place.is_none()
        {
            let refusal = Refusal::Total {
                limit: host.max_parked,
                key: "plugins.max_parked_calls",
            };
            approver.refused(&call.call_id, &refusal);
            return Err(call.too_many_waiting(refusal.to_string()).await);
        }
        let work = self.approve_and_run(&call, &tool, Gate::from(approver), arguments);
        host.while_parked(slot, place, work).await
    }

    /// Run a tool a transport's client called directly (MCP's `tools/call`):
    /// the same lifecycle, approval and metrics as a plugin's call, with the
    /// `exchange`'s approver asking that client's human. No plugin call waits
    /// meanwhile, so nothing is parked.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        exchange: &Exchange,
    ) -> Result<String, ToolError> {
        // Plugin tools only: a remote MCP server's tools are the node's to call with
        // its own credentials for them, not something it passes on to its clients.
        let tool = self.resolve_plugin_tool(name)?;
        let call = ToolCall::new(name, tool.spec.risk, exchange);
        let decided = exchange
            .redeemed
            .as_ref()
            .and_then(|redeemed| redeemed.outcome_for(name, &arguments));
        let gate = match decided {
            Some(outcome) if self.needs_approval(call.risk) => Gate::Decided(outcome),
            _ => Gate::from(self.approver_for(&call).await?),
        };
        self.approve_and_run(&call, &tool, gate, arguments).await
    }

    /// The risk of a tool as the host's tool path decides it, without running
    /// or listing anything: a loaded plugin's tool by its manifest, a remote
    /// tool (`<server>/<tool>`) by its server's last listing. `None` for a name
    /// the host does not know: a transport checking a `tool_call` event's
    /// origin (HAI) can tell the host's events from a plugin's forgeries.
    pub fn tool_risk(&self, name: &str) -> Option<Risk> {
        if let Some((server, tool)) = self.remote_server(name) {
            return server.listed_risk(tool);
        }
        let registry = self.registry();
        let plugin = registry.tool(name)?;
        plugin
            .manifest
            .tools
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.risk)
    }

    /// The configured MCP server a `<server>/<tool>` name belongs to, and the tool's name there.
    fn remote_server<'n>(&self, name: &'n str) -> Option<(Arc<RemoteServer>, &'n str)> {
        let (server, tool) = name.split_once('/')?;
        Some((self.inner.mcp_servers.get(server)?.clone(), tool))
    }

    /// Whether a tool of this risk needs a human's yes (`tools.approval_threshold`).
    pub fn needs_approval(&self, risk: Risk) -> bool {
        risk >= Risk::parse(&self.inner.tools.approval_threshold).unwrap_or(Risk::High)
    }

    async fn resolve_tool(&self, name: &str) -> Result<ResolvedTool, ToolError> {
        if let Some((server, tool)) = self.remote_server(name) {
            return resolve_remote(name, server, tool).await;
        }
        self.resolve_plugin_tool(name)
    }

    fn resolve_plugin_tool(&self, name: &str) -> Result<ResolvedTool, ToolError> {
        let registry = self.registry();
        let Some(plugin) = registry.tool(name).cloned() else {
            return Err(ToolError::Unknown(name.to_string()));
        };
        let Some(spec) = plugin.manifest.tools.iter().find(|t| t.name == name).cloned() else {
            return Err(ToolError::Unknown(name.to_string()));
        };
        Ok(ResolvedTool {
            spec,
            target: ToolTarget::Plugin(plugin),
        })
    }

    /// The approver a call needs (`None`: its risk needs none); a call that
    /// needs one and has none fails here, before anything runs.
    async fn approver_for(&self, call: &ToolCall<'_>) -> Result<Option<Arc<dyn Approver>>, ToolError> {
        if !self.needs_approval(call.risk) {
            return Ok(None);
        }
        match call.exchange.approver.clone() {
            Some(approver) => Ok(Some(approver)),
            None => {
                call.failed(ToolStage::NO_APPROVER).await;
                Err(ToolError::NoApprover(call.tool_name.to_string()))
            }
        }
    }

    async fn approve_and_run(
        &self,
        call: &ToolCall<'_>,
        tool: &ResolvedTool,
        gate: Gate,
        arguments: Value,
    ) -> Result<String, ToolError> {
        let name = call.tool_name;
        let outcome = match gate {
            Gate::Open => None,
            Gate::Decided(outcome) => Some(outcome),
            Gate::Ask(approver) => {
                let request = ApprovalRequest {
                    call_id: call.call_id.clone(),
                    tool_name: name.to_string(),
                    arguments: arguments.clone(),
                    risk: tool.spec.risk,
                    description: tool.spec.description.clone(),
                };
                let approvals = &self.inner.host.approvals;
                let asking = approvals.ask(approver.as_ref(), call.exchange.caller.as_ref(), request);
                Some(match tokio::time::timeout(approvals.timeout(), asking).await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(refusal)) => return Err(call.too_many_waiting(refusal.to_string()).await),
                    Err(_) => ApprovalOutcome::TimedOut,
                })
            }
        };
        if let Some(outcome) = outcome {
            match outcome {
                ApprovalOutcome::Approved => {}
                ApprovalOutcome::Rejected { feedback } => {
                    call.failed(ToolStage::REJECTED).await;
                    return Err(ToolError::Rejected {
                        tool: name.to_string(),
                        feedback,
                    });
                }
                ApprovalOutcome::TimedOut => {
                    call.failed(ToolStage::APPROVAL_TIMED_OUT).await;
                    return Err(ToolError::ApprovalTimedOut(name.to_string()));
                }
            }
        }
        call.send(ToolStage::Started {
            arguments: arguments.clone(),
        })
        .await;
        let result = match &tool.target {
            ToolTarget::Plugin(plugin) => {
                self.run_tool_instance(plugin, name, &arguments, call.exchange.nested())
                    .await
            }
            ToolTarget::Remote { server, tool } => self.run_remote_tool(server, tool, name, arguments).await,
        };
        let end = match &result {
            Ok(output) => ToolStage::Completed {
                result: serde_json::from_str(output).unwrap_or_else(|_| Value::String(output.clone())),
            },
            Err(error) => ToolStage::Failed {
                error: error.to_string(),
            },
        };
        call.send(end).await;
        result
    }

    async fn run_tool_instance(
        &self,
        plugin: &Arc<LoadedPlugin>,
        name: &str,
        arguments: &Value,
        exchange: Exchange,
    ) -> Result<String, ToolError> {
        let started = Instant::now();
        let outcome = self.run_tool_call(plugin, name, arguments, exchange).await;
        let label = match &outcome {
            Ok(Ok(_)) => "ok",
            // The tool answered with an error of its own: a failure, not a fault.
            Ok(Err(_)) => "failure",
            Err(error) => error.outcome(),
        };
        self.inner
            .metrics
            .observe_outcome("tool", &plugin.manifest.name, label, started.elapsed());
        settle(name, outcome)
    }

    /// `tools/call` of a remote tool, counted in the metrics under `mcp:<server>`.
    async fn run_remote_tool(
        &self,
        server: &RemoteServer,
        tool: &str,
        name: &str,
        arguments: Value,
    ) -> Result<String, ToolError> {
        let started = Instant::now();
        let outcome = server.call(tool, arguments).await;
        let label = match &outcome {
            Ok(Ok(_)) => "ok",
            Ok(Err(_)) => "failure",
            Err(error) => error.outcome(),
        };
        let owner = format!("mcp:{}", server.name());
        self.inner
            .metrics
            .observe_outcome("tool", &owner, label, started.elapsed());
        settle(name, outcome)
    }

    /// One `run-tool` call: the tool's own answer (`Ok(Err)` is an error it reported),
    /// or how the instance failed.
    async fn run_tool_call(
        &self,
        plugin: &Arc<LoadedPlugin>,
        name: &str,
        arguments: &Value,
        exchange: Exchange,
    ) -> Result<Result<String, String>, InvokeError> {
        let mut call_instance = self.call_instance(plugin, exchange).await?;
        let outcome = call_instance
            .call_run_tool(&plugin.exports, name, &arguments.to_string())
            .await;
        let store = call_instance.store();
        instance::drain_stdio(store);
        let (result, clean) = match outcome {
            Ok(Ok(output)) => match self.check_output(output) {
                Ok(output) => (Ok(Ok(output)), true),
                Err(error) => (Err(error), false),
            },
            Ok(Err(message)) => (Ok(Err(message)), true),
            Err(error) => (Err(instance::classify(store, error)), false),
        };
        self.release(plugin, call_instance, clean);
        result
    }
}

/// A tool's answer as the caller gets it: its output, or its own error or the
/// fault that stopped it as [`ToolError::Failed`].
fn settle<E: std::fmt::Display>(
    name: &str,
    outcome: Result<Result<String, String>, E>,
) -> Result<String, ToolError> {
    let failed = |message: String| ToolError::Failed {
        tool: name.to_string(),
        message,
    };
    match outcome {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(message)) => Err(failed(message)),
        Err(error) => Err(failed(error.to_string())),
    }
}

/// `name` (`<server>/<tool>`) as a tool of `server`: refused unless allow-listed,
/// then described from the server's listing.
async fn resolve_remote(
    name: &str,
    server: Arc<RemoteServer>,
    tool: &str,
) -> Result<ResolvedTool, ToolError> {
    if !server.allows(tool) {
        return Err(ToolError::NotAllowed {
            tool: name.to_string(),
            reason: format!("mcp.servers.{}.tools does not list {tool:?}", server.name()),
        });
    }
    let listed = server.tool(tool).await.map_err(|error| match error {
        McpClientError::UnknownTool { .. } => ToolError::Unknown(name.to_string()),
        other => ToolError::Failed {
            tool: name.to_string(),
            message: other.to_string(),
        },
    })?;
    let spec = ToolSpec {
        name: name.to_string(),
        description: listed.description.clone().unwrap_or_default(),
        parameters: listed.input_schema.clone(),
        risk: listed.risk(),
    };
    Ok(ResolvedTool {
        spec,
        target: ToolTarget::Remote {
            server,
            tool: tool.to_string(),
        },
    })
}
