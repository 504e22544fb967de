//! `wicket-core`: the sale core alone.
//!
//! ```text
//! wicket-core serve --config core/examples/core.toml
//! wicket-core check-config core/examples/core.toml
//! wicket-core mint-token --config core/examples/core.toml --event ev-42 --sub alice
//! curl -s localhost:8081/v1/events/ev-42/stock
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use wicket_core::config::CoreConfig;

#[derive(Parser)]
#[command(name = "wicket-core", about = "Wicket's sale core", version = wicket_core::VERSION)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the core API.
    Serve {
        /// Config file (TOML; a combined file with `[edge]` works too).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a config file and print every problem.
    CheckConfig {
        /// Config file to check.
        file: PathBuf,
    },
    /// Print an admission token signed with the config's signing key (for trying the API by hand).
    MintToken {
        /// Config file with `[tokens]` and its signing key.
        #[arg(long, short)]
        config: PathBuf,
        /// Event the token admits to (its `event` claim).
        #[arg(long)]
        event: String,
        /// Who it admits (its `sub` claim: the user id the holds will be counted against).
        #[arg(long)]
        sub: String,
        /// Most tickets one hold with it may take (`max_qty`).
        #[arg(long, default_value_t = 4)]
        max_qty: u32,
        /// Seconds until it expires.
        #[arg(long, default_value_t = 300)]
        lifetime: i64,
    },
}

fn load(path: &std::path::Path) -> Result<CoreConfig, ExitCode> {
    CoreConfig::from_file(path).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::CheckConfig { file } => match load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Cmd::MintToken { config, event, sub, max_qty, lifetime } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let result = wicket_core::token::Keyring::from_config(&cfg.tokens).and_then(|ring| {
                let claims = ring.new_claims(&event, &sub, &event, 0, max_qty, lifetime);
                ring.sign(&claims, None)
            });
            match result {
                Ok(t) => {
                    println!("{t}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Serve { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            wicket_core::logging::init(cfg.core.log_format(), "info");
            let rt = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let result = rt.block_on(async move {
                let listen = cfg.listen;
                let listener = tokio::net::TcpListener::bind(listen)
                    .await
                    .map_err(|e| anyhow::anyhow!("listen: cannot listen on {listen} (the `listen` key of the config): {e}"))?;
                wicket_core::run(cfg, listener, shutdown_signal()).await
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wicket-core: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
