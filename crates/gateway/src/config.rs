//! The gateway's configuration: the servers' own (`fleetmcp::Config`: the same variables and
//! TOML file), plus the upstream, from the file's `[gateway]` section and then the environment
//! (`FLEETMCP_UPSTREAM_*`), the environment winning as everywhere else.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use fleetmcp::Config;
use serde::Deserialize;

/// The upstream a gateway runs, one process per client session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// `FLEETMCP_UPSTREAM_COMMAND` (one command line, split as a POSIX shell splits words, with
    /// no expansion) or `gateway.command` (a string, the same way, or an array of words): the
    /// MCP server to run, which speaks stdio. Empty when `url` is set; one of the two is
    /// required.
    pub command: Vec<String>,
    /// `FLEETMCP_UPSTREAM_URL` / `gateway.url`: instead of a command, the `/mcp` URL of an MCP
    /// server that speaks Streamable HTTP (`http://` or `https://`): one upstream session per
    /// client session.
    pub url: Option<String>,
    /// `FLEETMCP_UPSTREAM_CA_FILE` / `gateway.ca_file`: for an `https://` URL, a PEM file of
    /// certificates trusted besides the system's roots (a private CA's). Unset: the system's
    /// roots only.
    pub ca_file: Option<PathBuf>,
    /// `FLEETMCP_UPSTREAM_MAX_PROCESSES` / `gateway.max_processes`: the most upstream processes
    /// this instance runs at once (one per session it holds); a session past it is refused
    /// with `503` and `Retry-After`. Default 100.
    pub max_processes: usize,
    /// `FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY` / `gateway.max_processes_per_key`: the most of
    /// them one client key (its principal, else its address: as `[limits]` keys it) may hold
    /// on this instance, so one client cannot take them all (its sessions per key,
    /// `limits.max_sessions_per_key`, are 1,000 by default); a session past it is refused with
    /// `503` and `Retry-After`. Default a quarter of `max_processes` (at least 1).
    pub max_processes_per_key: usize,
    /// `FLEETMCP_UPSTREAM_STOP_GRACE_MS` / `gateway.stop_grace_ms`: how long a process whose
    /// session ended has to exit once its stdin is closed, then again after `SIGTERM`, before
    /// `SIGKILL` (its whole process group each time). Default 2000.
    pub stop_grace: Duration,
    /// `FLEETMCP_UPSTREAM_MAX_LINE_BYTES` / `gateway.max_line_bytes`: the longest line an
    /// upstream may write on stdout (one JSON-RPC message) or stderr, and the longest answer
    /// or SSE event an HTTP upstream may send; a longer one is dropped and logged, never held
    /// whole. Default 4 MiB.
    pub max_line_bytes: usize,
    /// `FLEETMCP_UPSTREAM_TOOL_SCOPES` (`name=scope` pairs, separated by commas or spaces) /
    /// `[gateway.tool_scopes]` (`name = "scope"`): with authorization on (`[auth]`), the OAuth
    /// scope a call of each upstream tool needs, `*` for any tool not named; a token without
    /// it gets `403` before the call goes up. Empty: only `auth.required_scopes`.
    pub tool_scopes: BTreeMap<String, String>,
    /// `FLEETMCP_UPSTREAM_POLL_AFTER_MS` / `gateway.poll_after_ms`: SSE polling (SEP-1699) on
    /// the upstream's behalf: a request still running this long after it went up has its
    /// client connection ended (its stream goes on; the client resumes with `Last-Event-ID`
    /// after `http.sse_retry_ms`), and each connection the client opens again once it has
    /// been open this long; 2025-11-25 sessions only. Unset or 0: off (a request's connection
    /// stays until its answer).
    pub poll_after: Option<Duration>,
}

/// The `[gateway]` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    command: Option<Command>,
    url: Option<String>,
    ca_file: Option<PathBuf>,
    max_processes: Option<usize>,
    max_processes_per_key: Option<usize>,
    stop_grace_ms: Option<u64>,
    max_line_bytes: Option<usize>,
    tool_scopes: Option<BTreeMap<String, String>>,
    poll_after_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Command {
    Line(String),
    Words(Vec<String>),
}

/// The variables the gateway reads besides the servers'.
pub const VARIABLES: [&str; 9] = [
    "FLEETMCP_UPSTREAM_CA_FILE",
    "FLEETMCP_UPSTREAM_POLL_AFTER_MS",
    "FLEETMCP_UPSTREAM_TOOL_SCOPES",
    "FLEETMCP_UPSTREAM_COMMAND",
    "FLEETMCP_UPSTREAM_URL",
    "FLEETMCP_UPSTREAM_MAX_PROCESSES",
    "FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY",
    "FLEETMCP_UPSTREAM_STOP_GRACE_MS",
    "FLEETMCP_UPSTREAM_MAX_LINE_BYTES",
];

/// Reads `FLEETMCP_CONFIG` (optional) and the process environment.
pub fn load() -> Result<(Config, GatewayConfig), String> {
    let file = std::env::var_os("FLEETMCP_CONFIG").map(PathBuf::from);
    from_sources(file, std::env::vars())
}

/// The two configurations from a TOML file and a set of environment variables. The servers'
/// own configuration refuses sections it does not know, so it reads a copy of the file without
/// `[gateway]`.
pub fn from_sources(
    file: Option<PathBuf>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(Config, GatewayConfig), String> {
    let env: Vec<(String, String)> = env.into_iter().collect();
    let (section, rest) = match &file {
        Some(path) => split_file(path)?,
        None => (Section::default(), None),
    };
    let config = Config::from_sources(rest.as_ref().map(|f| f.path()), env.iter().cloned())
        .map_err(|e| e.to_string())?;
    let gateway = gateway_config(section, &env)?;
    Ok((config, gateway))
}

/// The file's `[gateway]` section, and the rest of the file in a temporary copy.
fn split_file(path: &PathBuf) -> Result<(Section, Option<tempfile::NamedTempFile>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))?;
    let section = match table.remove("gateway") {
        Some(v) => v
            .try_into::<Section>()
            .map_err(|e| format!("config file {}: [gateway]: {e}", path.display()))?,
        None => Section::default(),
    };
    let rest = toml::to_string(&table).map_err(|e| e.to_string())?;
    let mut copy = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    std::io::Write::write_all(&mut copy, rest.as_bytes()).map_err(|e| e.to_string())?;
    Ok((section, Some(copy)))
}

fn gateway_config(section: Section, env: &[(String, String)]) -> Result<GatewayConfig, String> {
    let var = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            // Set but empty is unset, as for the servers' own variables.
            .filter(|v| !v.trim().is_empty())
    };
    let number = |name: &str, from_file: Option<u64>, default: u64| -> Result<u64, String> {
        match var(name) {
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| format!("{name}: expected a whole number, got {v:?}")),
            None => Ok(from_file.unwrap_or(default)),
        }
    };
    let command = match (var("FLEETMCP_UPSTREAM_COMMAND"), section.command) {
        (Some(line), _) => split(line)?,
        (None, Some(Command::Line(line))) => split(&line)?,
        (None, Some(Command::Words(words))) => words,
        (None, None) => Vec::new(),
    };
    let url = var("FLEETMCP_UPSTREAM_URL")
        .map(String::from)
        .or(section.url)
        .filter(|u| !u.trim().is_empty());
    check_upstream(url.as_deref(), &command)?;
    let ca_file = var("FLEETMCP_UPSTREAM_CA_FILE")
        .map(PathBuf::from)
        .or(section.ca_file);
    let max_processes = number(
        "FLEETMCP_UPSTREAM_MAX_PROCESSES",
        section.max_processes.map(|n| n as u64),
        100,
    )?;
    if max_processes == 0 {
        return Err("FLEETMCP_UPSTREAM_MAX_PROCESSES must be at least 1".into());
    }
    let max_processes_per_key = number(
        "FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY",
        section.max_processes_per_key.map(|n| n as u64),
        (max_processes / 4).max(1),
    )?;
    if max_processes_per_key == 0 {
        return Err("FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY must be at least 1".into());
    }
    let tool_scopes = match var("FLEETMCP_UPSTREAM_TOOL_SCOPES") {
        Some(list) => scopes(list)?,
        None => section.tool_scopes.unwrap_or_default(),
    };
    let poll_after = match number("FLEETMCP_UPSTREAM_POLL_AFTER_MS", section.poll_after_ms, 0)? {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    };
    Ok(GatewayConfig {
        tool_scopes,
        poll_after,
        command,
        url,
        ca_file,
        max_processes: max_processes as usize,
        max_processes_per_key: max_processes_per_key.min(max_processes) as usize,
        stop_grace: Duration::from_millis(number(
            "FLEETMCP_UPSTREAM_STOP_GRACE_MS",
            section.stop_grace_ms,
            2000,
        )?),
        max_line_bytes: number(
            "FLEETMCP_UPSTREAM_MAX_LINE_BYTES",
            section.max_line_bytes.map(|n| n as u64),
            4 << 20,
        )?
        .max(1024) as usize,
    })
}

/// One upstream, command or URL, and a usable one.
fn check_upstream(url: Option<&str>, command: &[String]) -> Result<(), String> {
    match (url, command.first()) {
        (Some(_), Some(_)) => Err("FLEETMCP_UPSTREAM_COMMAND and FLEETMCP_UPSTREAM_URL are both set: the gateway serves one upstream".into()),
        (Some(u), None) if !u.starts_with("http://") && !u.starts_with("https://") => Err(
            format!("FLEETMCP_UPSTREAM_URL: {u:?} is not an http:// or https:// URL"),
        ),
        (None, None) => Err("FLEETMCP_UPSTREAM_COMMAND (or command in [gateway]) is required: the MCP server to run, which speaks stdio (or FLEETMCP_UPSTREAM_URL, one that speaks Streamable HTTP)".into()),
        (None, Some(first)) if first.is_empty() => {
            Err("FLEETMCP_UPSTREAM_COMMAND: the command is empty".into())
        }
        _ => Ok(()),
    }
}

/// `name=scope` pairs, separated by commas or white space.
fn scopes(list: &str) -> Result<BTreeMap<String, String>, String> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((name, scope)) if !name.is_empty() && !scope.is_empty() => {
                Ok((name.to_string(), scope.to_string()))
            }
            _ => Err(format!(
                "FLEETMCP_UPSTREAM_TOOL_SCOPES: {pair:?} is not name=scope"
            )),
        })
        .collect()
}

/// One command line into its words, as a POSIX shell splits them (quotes, backslashes; no
/// variables, globs or pipes).
fn split(line: &str) -> Result<Vec<String>, String> {
    shlex::split(line).ok_or_else(|| {
        format!("FLEETMCP_UPSTREAM_COMMAND: cannot split {line:?} into words (an unclosed quote?)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_environment_overrides_the_section_and_the_servers_sections_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "port = 4100\n[gateway]\ncommand = [\"node\", \"server.js\"]\nmax_processes = 7\n[gateway.tool_scopes]\necho = \"echo:run\"\n[sessions]\nidle_ttl_ms = 60000\n",
        )
        .unwrap();
        let (cfg, gw) = from_sources(Some(path.clone()), env(&[])).unwrap();
        assert_eq!(cfg.port, 4100);
        assert_eq!(gw.command, ["node", "server.js"]);
        assert_eq!(gw.max_processes, 7);
        assert_eq!(gw.max_processes_per_key, 1, "a quarter, at least one");
        assert_eq!(gw.stop_grace, Duration::from_secs(2));
        assert_eq!(gw.poll_after, None, "polling is off unless asked for");
        assert_eq!(
            gw.tool_scopes.get("echo").map(String::as_str),
            Some("echo:run")
        );
        let (_, gw) = from_sources(
            Some(path),
            env(&[
                (
                    "FLEETMCP_UPSTREAM_COMMAND",
                    "npx -y '@scope/some server' --stdio",
                ),
                ("FLEETMCP_UPSTREAM_MAX_PROCESSES", "3"),
                ("FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY", "5"),
                ("FLEETMCP_UPSTREAM_POLL_AFTER_MS", "250"),
            ]),
        )
        .unwrap();
        assert_eq!(gw.command, ["npx", "-y", "@scope/some server", "--stdio"]);
        assert_eq!(gw.max_processes, 3);
        assert_eq!(gw.max_processes_per_key, 3, "never above max_processes");
        assert_eq!(gw.poll_after, Some(Duration::from_millis(250)));
        let (_, gw) = from_sources(
            None,
            env(&[
                ("FLEETMCP_UPSTREAM_COMMAND", "x"),
                (
                    "FLEETMCP_UPSTREAM_TOOL_SCOPES",
                    "echo=echo:run, *=mcp:tools",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            gw.tool_scopes.get("echo").map(String::as_str),
            Some("echo:run")
        );
        assert_eq!(
            gw.tool_scopes.get("*").map(String::as_str),
            Some("mcp:tools")
        );
        let bad = env(&[
            ("FLEETMCP_UPSTREAM_COMMAND", "x"),
            ("FLEETMCP_UPSTREAM_TOOL_SCOPES", "echo"),
        ]);
        assert!(from_sources(None, bad).unwrap_err().contains("name=scope"));
    }

    #[test]
    fn a_gateway_without_a_command_or_with_a_bad_value_is_refused() {
        assert!(
            from_sources(None, env(&[]))
                .unwrap_err()
                .contains("FLEETMCP_UPSTREAM_COMMAND")
        );
        let bad = env(&[
            ("FLEETMCP_UPSTREAM_COMMAND", "x"),
            ("FLEETMCP_UPSTREAM_MAX_PROCESSES", "many"),
        ]);
        assert!(
            from_sources(None, bad)
                .unwrap_err()
                .contains("MAX_PROCESSES")
        );
        let zero = env(&[
            ("FLEETMCP_UPSTREAM_COMMAND", "x"),
            ("FLEETMCP_UPSTREAM_MAX_PROCESSES_PER_KEY", "0"),
        ]);
        assert!(from_sources(None, zero).unwrap_err().contains("PER_KEY"));
        let (_, gw) = from_sources(None, env(&[("FLEETMCP_UPSTREAM_COMMAND", "x")])).unwrap();
        assert_eq!((gw.max_processes, gw.max_processes_per_key), (100, 25));
        let quote = env(&[("FLEETMCP_UPSTREAM_COMMAND", "node 'x")]);
        assert!(from_sources(None, quote).unwrap_err().contains("unclosed"));
        let both = env(&[
            ("FLEETMCP_UPSTREAM_COMMAND", "x"),
            ("FLEETMCP_UPSTREAM_URL", "http://127.0.0.1:1/mcp"),
        ]);
        assert!(from_sources(None, both).unwrap_err().contains("both"));
        let other = env(&[("FLEETMCP_UPSTREAM_URL", "ws://example.test/mcp")]);
        assert!(from_sources(None, other).unwrap_err().contains("https://"));
        let (_, gw) = from_sources(
            None,
            env(&[
                ("FLEETMCP_UPSTREAM_URL", "https://example.test/mcp"),
                ("FLEETMCP_UPSTREAM_CA_FILE", "/etc/upstream-ca.pem"),
            ]),
        )
        .unwrap();
        assert_eq!(gw.ca_file, Some(PathBuf::from("/etc/upstream-ca.pem")));
        let (_, gw) = from_sources(
            None,
            env(&[("FLEETMCP_UPSTREAM_URL", "http://127.0.0.1:1/mcp")]),
        )
        .unwrap();
        assert_eq!(gw.url.as_deref(), Some("http://127.0.0.1:1/mcp"));
        assert!(gw.command.is_empty());
    }
}
