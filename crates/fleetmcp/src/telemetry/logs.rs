//! How a binary's logs are written: `RUST_LOG` filters (default `info`); `LOG_FORMAT=json`
//! writes one JSON object per line (the message unchanged in `message`, the event's fields
//! beside it, the request's span with its `trace_id` in `span`), anything else the
//! human-readable text.
//!
//! No log line carries a header, a secret of the configuration or a relay credential (those
//! travel sealed, `cluster/relay_auth.rs`). Session ids are logged where the contract's lines
//! name `sessionId` (takeover, recreation, relay failures).

/// The log format `LOG_FORMAT` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// `LOG_FORMAT`'s value: `json` (any case) is JSON, anything else text.
    pub fn from_env_value(value: Option<&str>) -> Self {
        match value {
            Some(v) if v.trim().eq_ignore_ascii_case("json") => LogFormat::Json,
            _ => LogFormat::Text,
        }
    }
}

/// Sets up `tracing` for a binary (see the module documentation). A second call does nothing.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let format = LogFormat::from_env_value(std::env::var("LOG_FORMAT").ok().as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            // `message` and the event's fields at the top level, as log pipelines expect;
            // the request span (its `trace_id`) under `span`.
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => {
            // Colour only on a terminal, so log files and test captures stay greppable.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
            builder.with_ansi(ansi).try_init()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_selects_json() {
        assert_eq!(LogFormat::from_env_value(Some("json")), LogFormat::Json);
        assert_eq!(LogFormat::from_env_value(Some(" JSON ")), LogFormat::Json);
        assert_eq!(LogFormat::from_env_value(Some("text")), LogFormat::Text);
        assert_eq!(LogFormat::from_env_value(None), LogFormat::Text);
    }
}
