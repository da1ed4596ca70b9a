//! `agora-bench`: the benchmark harness of issue 9. Runs the node under test
//! (the release binary) and its comparison in the same run, alternating, prints
//! one markdown table and writes it with every raw number as JSON.
//!
//! Absolute numbers on a shared machine are noisy; the ratios (and the ratios
//! of requests per CPU-second of each server process) are the result.

mod a2a;
mod accounting;
mod ceiling;
mod crowd;
mod fixture;
mod fleet;
mod fleet_publish;
mod hai;
mod load;
mod mcp;
mod procs;
mod report;
mod rounds;
mod rows;
mod settings;
mod tls;
mod wasmtime_serve;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::settings::Settings;

#[derive(Parser)]
#[command(
    name = "agora-bench",
    about = "Benchmarks Agora Node against its ceiling and its peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// A few seconds in all, no Python peers: checks the harness still works (CI).
    #[arg(long)]
    smoke: bool,
    /// Rows to run (1-17), comma-separated; default all.
    #[arg(long, value_delimiter = ',')]
    rows: Vec<u8>,
    /// Seconds of measured load per segment.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of unrecorded warm-up before each segment.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Alternating rounds (node, comparison) per row.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Client connections held open for the load.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Where the JSON goes.
    #[arg(long, default_value = "bench/results/latest.json")]
    out: PathBuf,
    /// The agora-node binary (default: target/release, else target/debug).
    #[arg(long)]
    node_bin: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// The ceiling of row 1: a bare axum server answering POST with fixed bytes (HTTPS for row 17).
    Ceiling {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        body_file: PathBuf,
        /// Serve HTTPS with this PEM certificate chain (row 17).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Ceiling {
        port,
        body_file,
        tls_cert,
        tls_key,
    }) = cli.command
    {
        return ceiling::serve(port, &body_file, tls_cert.as_deref().zip(tls_key.as_deref()));
    }
    let settings = if cli.smoke {
        Settings {
            smoke: true,
            duration: Duration::from_millis(500),
            warmup: Duration::from_millis(200),
            rounds: 1,
            connections: 4,
            node_bin: procs::node_binary(cli.node_bin.as_deref())?,
        }
    } else {
        Settings {
            smoke: false,
            duration: Duration::from_secs_f64(cli.duration),
            warmup: Duration::from_secs_f64(cli.warmup),
            rounds: cli.rounds.max(1),
            connections: cli.connections.max(1),
            node_bin: procs::node_binary(cli.node_bin.as_deref())?,
        }
    };
    let wanted: Vec<u8> = if cli.rows.is_empty() {
        if cli.smoke {
            // No Python peers in smoke mode: their venvs take minutes to make.
            vec![1, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        } else {
            (1..=17).collect()
        }
    } else {
        cli.rows.clone()
    };
    // The driver gets one core's worth of threads; the server under test the rest.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(rows::run_all(&settings, &wanted))?;
    println!("\n{}", report.markdown());
    let out = if cli.out.is_absolute() {
        cli.out.clone()
    } else {
        procs::repo_root().join(&cli.out)
    };
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report.json())?)?;
    println!("JSON written to {}", out.display());
    if report.broken() {
        anyhow::bail!("a row could not run (see the table)");
    }
    Ok(())
}
