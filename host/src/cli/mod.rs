//! Client commands of `agora-node`, one module per protocol.

pub mod agora;
pub mod envelope;
pub mod uagents;
