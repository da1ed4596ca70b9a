//! `agora-node`: run the node, develop plugins, and talk to other agents.

use std::path::PathBuf;
use std::process::ExitCode;

use agora_node::cli;
use agora_node::config::{CliOverrides, Config, LogFormat};
use agora_node::crypto::identity::NodeIdentity;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// mimalloc instead of glibc's malloc: every request allocates and frees on
/// whichever worker runs it (hyper's buffers, serde, a plugin call's store),
/// where glibc's malloc and free were ~9 % of a uAgents exchange's CPU. Measured
/// in bench rows 1, 3, 4, 6 and 11–13, same tree built with and without
/// (bench/README.md, ninth step). Its arenas are kept off transparent huge pages (`no_thp`): with
/// them the idle node's resident memory was 131 MB instead of 38 MB.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "agora-node",
    version,
    about = "A self-hosted agent node: seven agent protocols, logic in hot-reloaded WebAssembly plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// Configuration file (replaces config/agora.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Listen address of the shared HTTP listener, e.g. 127.0.0.1:8080.
    #[arg(long)]
    listen: Option<String>,
    /// Data folder (state, cache, key, plugins).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Plugins folder (default: {data_dir}/plugins).
    #[arg(long)]
    plugins_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node.
    Serve(ServeArgs),
    /// Run the node and rebuild plugin sources into the plugins folder on save.
    Dev(ServeArgs),
    /// Plugin authoring.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Protocol documents.
    #[command(subcommand)]
    Protocol(ProtocolCommand),
    /// Write a new Ed25519 node key (PKCS#8 PEM, mode 0600) and print its did:key.
    Keygen {
        /// Where to write it.
        #[arg(long, default_value = "data/node.key")]
        out: PathBuf,
        /// Replace an existing key file.
        #[arg(long)]
        force: bool,
    },
    /// A2A 1.0 client (JSON-RPC binding).
    #[command(subcommand)]
    A2a(cli::a2a::Command),
    /// Agora two-party JSON client.
    #[command(subcommand)]
    Agora(cli::agora::Command),
    /// Signed Agora envelope client.
    #[command(subcommand)]
    Envelope(cli::envelope::Command),
    /// uAgents client.
    #[command(subcommand)]
    Uagents(cli::uagents::Command),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Scaffold a plugin crate that builds and loads as is.
    New {
        name: String,
        /// Folder to create it in.
        #[arg(long, default_value = "plugins")]
        dir: PathBuf,
        /// Language of the plugin.
        #[arg(long, default_value = "rust")]
        lang: String,
    },
    /// Publish a plugin file to the fleet (store.backend = "postgres"): every node loads it.
    Publish {
        file: PathBuf,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Take a plugin (NAME or NAME.wasm) out of the fleet: every node withdraws it.
    Unpublish {
        name: String,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// The fleet's plugin set, and what each node serves.
    List {
        /// Configuration file (replaces config/agora.toml); AGORA_* variables apply too.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Args)]
struct FleetArgs {
    /// Configuration file (replaces config/agora.toml); AGORA_* variables apply too.
    #[arg(long)]
    config: Option<PathBuf>,
    /// How long to wait for every node to follow (0: do not wait).
    #[arg(long, default_value_t = 60)]
    wait_secs: u64,
}

#[derive(Subcommand)]
enum ProtocolCommand {
    /// Print a protocol document's SHA1 (hex, as the spec uses, and base64, as agora-protocol uses).
    Hash { file: PathBuf },
}

fn init_logging(format: LogFormat, level: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},cranelift=warn,wasmtime=warn"))
    });
    let writer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    // The console's log view: the same events as the log, warnings and errors only.
    let subscriber = tracing_subscriber::registry()
        .with(filter)
        .with(agora_node::logging::recent::RecentLayer);
    match format {
        LogFormat::Json => subscriber.with(writer.json()).init(),
        // Untrusted text (model errors, plugin output, client values) stays on its event's line.
        LogFormat::Human => subscriber
            .with(writer.fmt_fields(agora_node::logging::EscapedFields::default()))
            .init(),
    }
}

fn overrides(args: &ServeArgs) -> CliOverrides {
    CliOverrides {
        listen: args.listen.clone(),
        data_dir: args.data_dir.clone(),
        plugins_dir: args.plugins_dir.clone(),
    }
}

async fn serve(args: ServeArgs, dev: bool) -> Result<(), String> {
    let config = Config::load(args.config.as_deref(), &overrides(&args)).map_err(|e| e.to_string())?;
    init_logging(config.log_format, &config.log_level);
    let identity = NodeIdentity::load_or_create(&config.identity.key_file).map_err(|e| e.to_string())?;
    tracing::info!(did = %identity.did(), "node identity");
    let sources = config.plugins.sources_dir.clone();
    let plugins_dir = config.plugins.dir.clone();
    let node = agora_node::Node::start(config).await.map_err(|e| e.to_string())?;
    // Plugin settings follow the file while the node runs; held until it stops.
    let _config_watch = agora_node::node::config_watch::watch(
        node.state().runtime.clone(),
        args.config.clone(),
        overrides(&args),
    )
    .map_err(|e| format!("cannot watch the configuration file: {e}"))?;
    for addr in node.addresses() {
        // One line per listener on stdout, for scripts and tests waiting for readiness.
        println!("agora-node listening on {}://{addr}", node.http_scheme());
    }
    if dev {
        // Build output goes beside the sources' workspace (or where CARGO_TARGET_DIR says),
        // never into a watched folder.
        let target = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => std::path::absolute(dir),
            None => std::path::absolute(sources.join("../target/plugins")),
        }
        .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            if let Err(error) = agora_node::dev::rebuild_loop(sources, target, plugins_dir).await {
                tracing::error!(%error, "dev mode watcher stopped");
            }
        });
    }
    node.serve(agora_node::node::shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    let done = match cli.command {
        Command::Serve(args) => serve(args, false).await,
        Command::Dev(args) => serve(args, true).await,
        Command::Plugin(PluginCommand::New { name, dir, lang }) => {
            let created = agora_node::scaffold::new_plugin(&name, &dir, &lang).map_err(|e| e.to_string())?;
            println!("created {}", created.display());
            println!("build:  {}", agora_node::scaffold::build_line(&lang, &name));
            Ok(())
        }
        Command::Plugin(PluginCommand::Publish { file, fleet }) => {
            let config = fleet_config(fleet.config.as_deref())?;
            let wait = std::time::Duration::from_secs(fleet.wait_secs);
            return cli::plugin::publish(&config, &file, wait)
                .await
                .map(rollout_status);
        }
        Command::Plugin(PluginCommand::Unpublish { name, fleet }) => {
            let config = fleet_config(fleet.config.as_deref())?;
            let wait = std::time::Duration::from_secs(fleet.wait_secs);
            return cli::plugin::unpublish(&config, &name, wait)
                .await
                .map(rollout_status);
        }
        Command::Plugin(PluginCommand::List { config }) => {
            cli::plugin::list(&fleet_config(config.as_deref())?).await
        }
        Command::Protocol(ProtocolCommand::Hash { file }) => {
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let hex = agora_node::crypto::protocol_hash(&bytes);
            println!("{hex}");
            if let Some(b64) = agora_node::transports::agora::document::hash_as_base64(&hex) {
                println!("{b64}");
            }
            Ok(())
        }
        Command::Keygen { out, force } => {
            let identity = NodeIdentity::generate();
            identity.write(&out, force).map_err(|e| e.to_string())?;
            println!("{}", identity.did());
            Ok(())
        }
        Command::Agora(command) => cli::agora::run(command).await,
        Command::Envelope(command) => cli::envelope::run(command).await,
        Command::Uagents(command) => cli::uagents::run(command).await,
        // Its own exit statuses: a task left waiting on input is not a failure.
        Command::A2a(command) => return cli::a2a::run(command).await,
    };
    done.map(|()| ExitCode::SUCCESS)
}

fn fleet_config(file: Option<&std::path::Path>) -> Result<Config, String> {
    Config::load(file, &CliOverrides::default()).map_err(|e| e.to_string())
}

/// A rollout some node did not follow (yet, or at all) exits 2: the change is published.
fn rollout_status(every_node: bool) -> ExitCode {
    if every_node {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

/// `--version`: the node's version and the plugin contract it speaks, so a
/// plugin author can tell which SDK and WIT world a binary loads.
static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} ({})",
        env!("CARGO_PKG_VERSION"),
        agora_node::scaffold::plugin_contract()
    )
});

fn parse_cli() -> Cli {
    let matches = Cli::command().version(VERSION.as_str()).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(parse_cli()).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("agora-node: {error}");
            ExitCode::FAILURE
        }
    }
}
