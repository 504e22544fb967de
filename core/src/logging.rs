//! How both binaries (`wicket-core`, and `wicket` with its edge) write their logs: `log-format = "text"`
//! (the default) or `"json"` (one JSON object a line), on stderr, with colour codes only when stderr is a
//! terminal (a log file or journald gets none). `RUST_LOG` sets the levels.

/// The value of a `log-format` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line (`timestamp`, `level`, `fields.message`, `target`...).
    Json,
}

impl LogFormat {
    /// The accepted spellings, for config errors.
    pub const EXPECTED: &'static str = "\"text\" or \"json\"";

    /// `"text"` or `"json"`; anything else is `None` (a config error naming the key).
    pub fn parse(value: &str) -> Option<LogFormat> {
        match value {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// Installs the process's log subscriber (once; a second call changes nothing). `default_filter` applies
/// when `RUST_LOG` is unset.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn only_text_and_json_are_log_formats() {
        assert_eq!(LogFormat::parse("text"), Some(LogFormat::Text));
        assert_eq!(LogFormat::parse("json"), Some(LogFormat::Json));
        for bad in ["JSON", "", "logfmt", " json"] {
            assert_eq!(LogFormat::parse(bad), None, "{bad:?}");
        }
    }
}
