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
use wicket_core::logging::LogFormat;
use wicket_edge::config::WicketConfig;

/// Log levels when `RUST_LOG` is unset: the edge's and an embedded core's own lines at info.
const LOG_FILTER: &str = "warn,wicket_edge=info,wicket_core=info";

// Pingora allocates per request (header maps, boxed phase futures); mimalloc's thread-local
// free lists serve that pattern better than glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "wicket", version = wicket_core::VERSION, about = "Virtual waiting room and flash-sale edge")]
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
    Demo {
        /// Public edge port.
        #[arg(long, default_value_t = 8080)]
        edge_port: u16,
        /// Admin port.
        #[arg(long, default_value_t = 9090)]
        admin_port: u16,
        /// Core port.
        #[arg(long, default_value_t = 8081)]
        core_port: u16,
        /// Port of the stand-in for the existing site.
        #[arg(long, default_value_t = 3000)]
        origin_port: u16,
        /// Seconds from the start to the sale's opening.
        #[arg(long, default_value_t = wicket_edge::demo::OPENS_IN_SECONDS)]
        opens_in_seconds: u64,
    },
    /// Validate a config file and print every problem.
    CheckConfig {
        /// Config file.
        file: PathBuf,
    },
    /// Write the configuration reference (one Markdown page per part of the file, generated from
    /// the config types) into a folder: `wicket config-reference docs/src/reference`.
    ConfigReference {
        /// The folder of the pages (docs/src/reference).
        dir: PathBuf,
    },
    /// Print an nginx config's limit_req zones as [[edge.limits]] TOML (following include);
    /// what cannot be carried over exactly is listed on stderr with file:line, and the exit
    /// status is then 2.
    NginxImport {
        /// The nginx config (nginx.conf or a site file).
        file: PathBuf,
        /// The edge's config, for its user-header / user-cookie (maps $http_* / $cookie_* keys to user).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands without a config log as text; `serve` and `core` as their config's `log-format` says.
    let text_logs = || wicket_core::logging::init(LogFormat::Text, LOG_FILTER);
    match cli.command {
        Command::NginxImport { file, config } => {
            text_logs();
            let (header, cookie) = match &config {
                Some(c) => match load(c) {
                    Ok(cfg) => (cfg.edge.user_header.clone(), cfg.edge.user_cookie.clone()),
                    Err(e) => {
                        eprintln!("{}: invalid\n{e}", c.display());
                        return ExitCode::from(1);
                    }
                },
                None => (None, None),
            };
            match wicket_edge::nginx_import::import(&file, header.as_deref(), cookie.as_deref()) {
                Ok(found) => {
                    print!("{}", found.toml(&file));
                    for l in &found.left_out {
                        eprintln!("not imported: {l}");
                    }
                    if found.left_out.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) }
                }
                Err(e) => {
                    eprintln!("wicket nginx-import: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::ConfigReference { dir } => {
            for page in wicket_edge::reference::pages() {
                let path = dir.join(page.file);
                if let Err(e) = std::fs::write(&path, page.text) {
                    eprintln!("wicket config-reference: {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Command::CheckConfig { file } => match load(&file).inspect(|_| text_logs()) {
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
            wicket_core::logging::init(cfg.log_format(), LOG_FILTER);
            match wicket_edge::run(cfg, Box::new(wicket_edge::server::SignalShutdown)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wicket: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Core { config } => {
            let cfg = match wicket_core::config::CoreConfig::from_file(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("wicket: {e}");
                    return ExitCode::FAILURE;
                }
            };
            wicket_core::logging::init(cfg.core.log_format(), LOG_FILTER);
            match wicket_edge::server::run_core(cfg) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wicket: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Demo { edge_port, admin_port, core_port, origin_port, opens_in_seconds } => {
            text_logs();
            let ports = wicket_edge::demo::DemoPorts { edge: edge_port, admin: admin_port, core: core_port, origin: origin_port };
            match wicket_edge::demo::run(ports, opens_in_seconds) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("wicket: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Parses and validates, reporting every problem with its path.
fn load(path: &std::path::Path) -> Result<WicketConfig, wicket_edge::check::ConfigErrors> {
    let (cfg, mut issues) = WicketConfig::check_file(path);
    // The same file runs the core in this process: its part is checked here too (even when the
    // edge's part has problems), so `check-config` never says ok to a file `serve` would refuse
    // and lists every problem in one answer. Both read `[tokens]`: a path is reported once.
    if cfg.as_ref().is_some_and(|c| c.edge.core == "embedded") {
        let core: Vec<_> = wicket_edge::config::embedded_core_issues(path)
            .into_iter()
            .filter(|c| !issues.iter().any(|i| i.path == c.path))
            .collect();
        issues.extend(core);
    }
    match cfg {
        Some(cfg) if issues.is_empty() => Ok(cfg),
        _ => Err(wicket_edge::check::ConfigErrors(issues)),
    }
}
