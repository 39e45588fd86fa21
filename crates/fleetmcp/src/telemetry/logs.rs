//! How a binary's logs are written: `RUST_LOG` filters (default `info`); `LOG_FORMAT=json`
//! writes one JSON object per line (the message unchanged in `message`, the event's fields
//! beside it, the request's span with its `trace_id` in `span`), anything else the
//! human-readable text. With the cargo feature `otlp`, spans are also exported when an OTLP
//! endpoint is set ([`super::otlp`]).
//!
//! Lines go to stdout, or to stderr once stdout carries the MCP messages of the stdio transport
//! ([`keep_stdout_for_messages`]): a log line there would be read by the client as a message.
//!
//! No log line carries a header, a secret of the configuration or a relay credential (those
//! travel sealed, `fleet/relay_auth/`). Session ids are logged where the contract's lines
//! name `sessionId` (takeover, recreation, relay failures).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether stdout is the stdio transport's: set once, never cleared. Process-global because
/// stdout is (the log subscriber a binary installs is the one other global here).
static STDOUT_CARRIES_MESSAGES: AtomicBool = AtomicBool::new(false);

/// From now on every log line goes to stderr: stdout carries the stdio transport's messages.
/// Called as soon as a server is configured for stdio (and by [`init_tracing`] when
/// `FLEETMCP_TRANSPORT` says so, before anything is configured), so no line reaches stdout
/// before the transport starts either.
pub(crate) fn keep_stdout_for_messages() {
    STDOUT_CARRIES_MESSAGES.store(true, Ordering::Relaxed);
}

/// Where the log subscriber writes, chosen per line (see [`keep_stdout_for_messages`]).
struct LogOut;

/// One line's destination.
enum LogWriter {
    Stdout(io::Stdout),
    Stderr(io::Stderr),
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogOut {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        if STDOUT_CARRIES_MESSAGES.load(Ordering::Relaxed) {
            LogWriter::Stderr(io::stderr())
        } else {
            LogWriter::Stdout(io::stdout())
        }
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Stdout(o) => o.write(buf),
            Self::Stderr(e) => e.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Self::Stdout(o) => o.write_all(buf),
            Self::Stderr(e) => e.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Stdout(o) => o.flush(),
            Self::Stderr(e) => e.flush(),
        }
    }
}

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
/// With `FLEETMCP_TRANSPORT=stdio` every line goes to stderr from the first one.
///
/// With the cargo feature `otlp` and `OTEL_EXPORTER_OTLP_ENDPOINT` (or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, spans are also exported over OTLP/HTTP, named by
/// `OTEL_SERVICE_NAME` (default: the binary's name); call [`flush_traces`] once the server has
/// stopped.
pub fn init_tracing() {
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let format = LogFormat::from_env_value(std::env::var("LOG_FORMAT").ok().as_deref());
    // Read here, not only by the configuration: lines written before it is loaded must not
    // reach the client either.
    let stdio =
        std::env::var("FLEETMCP_TRANSPORT").is_ok_and(|v| v.trim().eq_ignore_ascii_case("stdio"));
    if stdio {
        keep_stdout_for_messages();
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_writer(LogOut);
    let fmt = match format {
        LogFormat::Json => fmt
            .json()
            // `message` and the event's fields at the top level, as log pipelines expect;
            // the request span (its `trace_id`) under `span`.
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        LogFormat::Text => {
            // Colour only on a terminal, so log files and test captures stay greppable.
            let ansi = if stdio {
                io::IsTerminal::is_terminal(&io::stderr())
            } else {
                io::IsTerminal::is_terminal(&io::stdout())
            };
            fmt.with_ansi(ansi).boxed()
        }
    };
    // The filter is global: a span RUST_LOG disables is neither logged nor exported.
    let logs = tracing_subscriber::registry().with(filter).with(fmt);
    #[cfg(feature = "otlp")]
    {
        let (otlp, failed) = match super::otlp::layer() {
            Ok(layer) => (layer, None),
            Err(e) => (None, Some(e)),
        };
        if logs.with(otlp).try_init().is_ok()
            && let Some(e) = failed
        {
            // Logging works without the exporter: say why spans are not exported, and go on.
            tracing::warn!(error = %e, "OTLP: spans are not exported");
        }
    }
    #[cfg(not(feature = "otlp"))]
    let _ = logs.try_init();
}

/// Exports the spans not yet sent and stops the exporter (waiting for the collector, bounded by
/// the exporter's timeout): call it once the server has stopped. Does nothing without the
/// feature `otlp` or when no endpoint was set.
pub fn flush_traces() {
    super::otlp::flush();
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
