//! `wicket`: the Wicket edge (and, once wired, the core and the demo).
//!
//! ```text
//! wicket check-config wicket.toml
//! wicket serve --config wicket.toml
//! curl -i http://127.0.0.1:8080/
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use wicket_edge::config::WicketConfig;

#[derive(Parser)]
#[command(name = "wicket", version, about = "Virtual waiting room and flash-sale edge")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the edge (public port, admin port).
    Serve {
        /// Config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the sale core alone.
    Core {
        /// Config file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Everything embedded plus a demo origin; prints the URLs to open.
    Demo,
    /// Validate a config file and print every problem.
    CheckConfig {
        /// Config file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,wicket_edge=info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::CheckConfig { file } => match load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: invalid\n{e}", file.display());
                ExitCode::from(2)
            }
        },
        Command::Serve { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{}: invalid\n{e}", config.display());
                    return ExitCode::from(2);
                }
            };
            match wicket_edge::run(cfg, Box::new(wicket_edge::server::SignalShutdown)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wicket: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Core { .. } | Command::Demo => {
            eprintln!("wicket: not yet wired: the core (wicket-core) is not linked into this binary yet");
            ExitCode::FAILURE
        }
    }
}

/// Parses and validates, reporting every problem with its path.
fn load(path: &std::path::Path) -> Result<WicketConfig, wicket_edge::config::ConfigErrors> {
    let cfg = WicketConfig::from_file(path)?;
    let issues = cfg.validate();
    if issues.is_empty() { Ok(cfg) } else { Err(wicket_edge::config::ConfigErrors(issues)) }
}
