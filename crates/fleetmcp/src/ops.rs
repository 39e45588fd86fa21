//! The operator's command (`fleetmcp-ctl`, or `help-desk fleet ...` through `fleetmcp::run`):
//! reads the fleet from the Redis its instances share, and asks an instance to drain.
//!
//! - `status`: a table of every instance that beat (alive or gone), with its start time, the
//!   age of its last beat, its address, the sessions its index holds (orphaned when it is gone)
//!   and its unfinished background tasks (see `fleet/census.rs`: indexes only, never `KEYS`);
//! - `drain <machine-id>`: a drain request on that instance's channel, signed with the fleet's
//!   `MCP_SESSION_SECRET` (see `fleet/drain_request.rs`); the instance then stops gracefully
//!   as on SIGTERM and exits 0. The instance answers whether it accepted the request: a
//!   refusal (another secret) or no answer within 3 s is reported, with exit status 1.
//!
//! It takes the fleet's own configuration (`REDIS_URL` or `REDIS_HOST`/`REDIS_PORT`,
//! `MCP_SESSION_SECRET`, `FRONTMCP_HA_KEY_PREFIX`, or `FLEETMCP_CONFIG`): run it with the
//! environment the instances run with. Every Redis call is bounded by the connection's timeouts.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use crate::config::Config;
use crate::fleet::census::Census;
use crate::redis_conn::RedisConn;

/// What the command accepts.
pub const USAGE: &str = "usage: fleetmcp-ctl status | fleetmcp-ctl drain <machine-id>
  (help-desk and everything take the same as `<binary> fleet status|drain <machine-id>`)
  Reads the fleet's configuration like its instances: REDIS_URL (or REDIS_HOST/REDIS_PORT),
  MCP_SESSION_SECRET (for drain), FRONTMCP_HA_KEY_PREFIX, FLEETMCP_CONFIG.";

/// Runs the command `args` (without the program name) with the configuration from the
/// environment; prints its result (stdout) or error (stderr) and returns the exit code: 0 done,
/// 1 failed (Redis unreachable, no such instance), 2 bad usage or configuration.
pub(crate) async fn main(args: &[String]) -> i32 {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let outcome = match args.as_slice() {
        ["status"] => status(&config).await.map(|c| render(&c)),
        ["drain", machine_id] => drain(&config, machine_id).await.map(|_| {
            format!(
                "{machine_id}: drain requested and accepted; it stops gracefully as on SIGTERM\n"
            )
        }),
        _ => {
            eprintln!("{USAGE}");
            return 2;
        }
    };
    match outcome {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Connects to the fleet's Redis (bounded by its connect timeout).
async fn connect(config: &Config) -> Result<RedisConn, String> {
    let Some(cfg) = config.redis.clone() else {
        return Err("no Redis configured: set REDIS_URL (or REDIS_HOST/REDIS_PORT, or [redis] in FLEETMCP_CONFIG) as for the fleet".into());
    };
    let target = cfg.display_target();
    RedisConn::connect(cfg)
        .await
        .map_err(|e| format!("cannot reach the fleet's Redis at {target}: {e}"))
}

/// The fleet as its Redis knows it now.
pub async fn status(config: &Config) -> Result<Census, String> {
    let redis = connect(config).await?;
    crate::fleet::census::read(&redis, config)
        .await
        .map_err(|e| format!("reading the fleet: {e}"))
}

/// Asks instance `machine_id` to drain, and waits for its answer; `Ok(1)` once it accepted the
/// request. An error when no live instance listens under that id, without
/// `MCP_SESSION_SECRET`, when the instance refused the request (a secret not the fleet's), or
/// when it did not answer.
pub async fn drain(config: &Config, machine_id: &str) -> Result<i64, String> {
    let redis = connect(config).await?;
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let source = format!("operator@{host}");
    use crate::fleet::Drained;
    match crate::fleet::request_drain(&redis, config, &source, machine_id).await {
        Ok(Drained::NoInstance) => Err(format!(
            "no running instance listens as {machine_id} (see `status`)"
        )),
        Ok(Drained::Accepted) => Ok(1),
        Ok(Drained::Refused(why)) => Err(format!(
            "{machine_id} refused the drain request: {why} (is MCP_SESSION_SECRET the fleet's?)"
        )),
        Ok(Drained::Unanswered) => Err(format!(
            "{machine_id} did not answer the drain request within 3 s; see `status` and its log"
        )),
        Err(e) => Err(format!("cannot ask {machine_id} to drain: {e}")),
    }
}

/// The census as a table: a summary line, then one row per instance.
pub fn render(census: &Census) -> String {
    let alive = census.instances.iter().filter(|i| i.alive).count();
    let mut out = format!(
        "{alive} instance(s) alive, {} gone; {} orphaned session(s)\n",
        census.instances.len() - alive,
        census.orphaned_sessions()
    );
    let header = [
        "MACHINE ID",
        "STATE",
        "STARTED",
        "BEAT AGE",
        "ADDRESS",
        "SESSIONS",
        "TASKS",
    ];
    let rows: Vec<[String; 7]> = census
        .instances
        .iter()
        .map(|i| {
            // A graceful stop leaves no last beat to count from.
            let age = i.last_beat.map_or("stopped".into(), |beat| {
                format!("{:.1} s", census.at.saturating_sub(beat) as f64 / 1000.0)
            });
            [
                i.machine_id.clone(),
                if i.alive { "alive" } else { "gone" }.into(),
                i.started_at.map_or("-".into(), |ms| {
                    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(ms))
                }),
                age,
                i.address.clone().unwrap_or_else(|| "-".into()),
                if i.alive {
                    i.sessions.to_string()
                } else {
                    format!("{} orphaned", i.sessions)
                },
                i.tasks.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (cell, w) in cells.iter().zip(widths) {
            let _ = write!(l, "{cell:<w$}  ");
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}
