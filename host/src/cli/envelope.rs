//! `agora-node envelope …`: the signed Agora envelopes client on the command line (being written).

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {
    /// Not available yet.
    Send,
}

pub async fn run(_command: Command) -> Result<(), String> {
    Err("not available yet".into())
}
