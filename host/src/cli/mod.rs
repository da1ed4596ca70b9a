//! Client commands of `agora-node`, one module per protocol.
//!
//! The commands read no config file; their outbound trust roots are the
//! system's plus `AGORA_TLS__CA_FILE`, the variable the node reads for
//! `tls.ca_file`, so a CLI call trusts what the node trusts.

pub mod a2a;
pub mod agora;
pub mod envelope;
pub mod plugin;
pub mod uagents;

/// Set up the shared outbound client before a command calls out.
fn init_outbound_tls() -> Result<(), String> {
    // The operator typed the URL: no service of theirs is being protected from them.
    crate::peers::http_client::set_address_policy(crate::peers::http_client::AddressPolicy::any());
    let ca_file = std::env::var_os("AGORA_TLS__CA_FILE").unwrap_or_default();
    crate::peers::tls::init(std::path::Path::new(&ca_file)).map_err(|e| e.to_string())
}
