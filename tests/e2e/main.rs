//! End-to-end tests: real `agora-node` processes, real plugins, real sockets.
//! One module per area; the harness is in `support`.

mod support;

mod a2a;
mod a2a_access;
mod a2a_client;
mod a2a_fleet;
mod a2a_limits;
mod agora;
mod agora_limits;
mod almanac;
mod approval_share;
mod arena;
mod browser_policy;
mod capabilities;
mod console;
mod console_page;
mod crash;
mod envelopes;
mod fleet;
mod fleet_faults;
mod fleet_plugins;
mod hai;
mod hai_fleet;
mod hai_resume;
mod host;
mod hostile_edge;
mod hostile_hai;
mod hostile_logs;
mod hostile_model;
mod hostile_runtime;
mod hostile_signed;
mod mcp;
mod mcp_client;
mod mcp_fleet;
mod mcp_sessions;
mod observability;
mod open_port;
mod outbound_policy;
mod pki;
mod postgres_tls;
mod scripting;
mod scripting_tools;
mod tls_inbound;
mod tls_outbound;
mod uagents;
