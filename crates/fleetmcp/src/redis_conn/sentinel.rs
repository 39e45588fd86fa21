//! Redis Sentinel: which server is master, asked of the sentinels when a connection opens and
//! every [`SENTINEL_WATCH`] after, and whether a server still is one (`ROLE`), so the
//! connection follows a failover without a restart.

use std::collections::HashMap;
use std::sync::{LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::{ConnectionManager, MultiplexedConnection};

use super::{CommandError, Inner, unavailable};
use crate::redis_config::RedisConfig;

/// With Sentinel, how often the sentinels are asked whether the master changed. A manual or
/// automatic failover promotes the replica at once, but the old master keeps accepting writes
/// (lost when it is demoted, seconds later) until it is reconfigured: the connection must move
/// as soon as the sentinels name the new one.
const SENTINEL_WATCH: Duration = Duration::from_millis(250);

/// The connection settings of the server to use now: the configured one, or with Sentinel the
/// master the first sentinel that answers names (each asked within the connect timeout plus
/// one command timeout).
pub(crate) async fn server_info(cfg: &RedisConfig) -> Result<redis::ConnectionInfo, CommandError> {
    let config =
        |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
    if !cfg.is_sentinel() {
        return cfg.connection_info().map_err(config);
    }
    let master = cfg.sentinel_master.as_deref().unwrap_or_default();
    let bound = cfg.connect_timeout() + cfg.command_timeout();
    let mut last = String::from("no sentinel configured");
    for (host, port) in cfg.sentinel_addresses().map_err(config)? {
        let question = ["get-master-addr-by-name", master];
        let named = ask::<Option<(String, u16)>>(cfg, &host, port, &question);
        match tokio::time::timeout(bound, named).await {
            Ok(Ok(Some((h, p)))) => return cfg.server_connection_info(&h, p).map_err(config),
            Ok(Ok(None)) => {
                last = format!("sentinel {host}:{port} knows no master named {master:?}")
            }
            Ok(Err(e)) => last = format!("sentinel {host}:{port}: {e}"),
            Err(_) => {
                last = format!(
                    "sentinel {host}:{port} did not answer within {} ms",
                    bound.as_millis()
                )
            }
        }
    }
    Err(CommandError::Unavailable(last))
}

/// Connections to the sentinels, kept open between questions. Asking on a new connection each
/// time cost seven connections a second an instance with three sentinels (the master asked
/// every [`SENTINEL_WATCH`], each sentinel's view every second), thousands a second at each
/// sentinel for a fleet of hundreds. One multiplexed connection per sentinel and settings
/// (so entries are bounded by the configuration), dropped when a question on it fails or goes
/// unanswered within the command timeout (a sentinel restarted, paused or cut off), and opened
/// again by the next question.
static LINKS: LazyLock<Mutex<HashMap<String, MultiplexedConnection>>> =
    LazyLock::new(Default::default);

/// Asks `SENTINEL <args>` of the sentinel at `host:port` (its own credentials and TLS) on its
/// kept connection, within the connect timeout (when one must be opened) plus the command
/// timeout.
async fn ask<T: redis::FromRedisValue>(
    cfg: &RedisConfig,
    host: &str,
    port: u16,
    args: &[&str],
) -> Result<T, CommandError> {
    let config =
        |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
    let info = cfg.sentinel_connection_info(host, port).map_err(config)?;
    let key = format!("{info:?}");
    let kept = LINKS.lock().get(&key).cloned();
    let mut conn = match kept {
        Some(conn) => conn,
        None => {
            let client = cfg.client_for(info).map_err(config)?;
            let open = client.get_multiplexed_async_connection();
            let conn = tokio::time::timeout(cfg.connect_timeout(), open)
                .await
                .map_err(|_| timeout(cfg.connect_timeout()))?
                .map_err(unavailable)?;
            LINKS.lock().insert(key.clone(), conn.clone());
            conn
        }
    };
    let cmd = redis::cmd("SENTINEL").arg(args).clone();
    let answer = tokio::time::timeout(cfg.command_timeout(), cmd.query_async::<T>(&mut conn))
        .await
        .map_err(|_| timeout(cfg.command_timeout()))
        .and_then(|a| a.map_err(unavailable));
    if answer.is_err() {
        LINKS.lock().remove(&key);
    }
    answer
}

fn timeout(after: Duration) -> CommandError {
    CommandError::Timeout(after.as_millis() as u64)
}

/// What one sentinel says of the master it watches.
#[derive(Clone, Debug)]
pub(super) struct SentinelView {
    /// `host:port`.
    pub master: String,
    /// A failover of it is under way (this sentinel leads it).
    pub failing_over: bool,
    /// This sentinel finds the master down (`s_down`, `o_down`): it may be voting for a
    /// failover another sentinel leads.
    pub master_down: bool,
    /// The master's replicas as this sentinel lists them.
    pub replicas: Vec<ReplicaView>,
}

/// One replica in a sentinel's list.
#[derive(Clone, Debug)]
pub(super) struct ReplicaView {
    /// `host:port`.
    pub address: String,
    /// Found down (see [`is_not_down`]): no failover promotes it. One not down, whatever role
    /// it reports and whether or not it is connected to the master yet, is one a failover
    /// could promote: a replica promoted by a failover the master does not know of yet, one
    /// reconnecting, or an old master after a failover, which the sentinels convert into a
    /// replica only 8 s or more after it (and which, until then, a second failover promotes as
    /// it is: Redis Sentinel picks among the replicas it finds up, whatever they hold).
    pub down: bool,
    /// The master (`host:port`) it reports replicating from with its link up, if it does.
    pub synced_to: Option<String>,
    /// The replica this sentinel is promoting in the failover it leads (`promoted`).
    pub promoted: bool,
}

/// What each configured sentinel says of the master, asked of all at once: one entry a
/// sentinel, in the configuration's order, `None` for one that did not answer within the command
/// timeout (each is bounded on its own, so one that hangs leaves the others' answers).
pub(super) async fn sentinel_views(
    cfg: &RedisConfig,
) -> Result<Vec<Option<SentinelView>>, CommandError> {
    let sentinels = cfg
        .sentinel_addresses()
        .map_err(|e| CommandError::Unavailable(e.to_string()))?;
    let views = futures_util::future::join_all(sentinels.iter().map(|(host, port)| {
        tokio::time::timeout(cfg.command_timeout(), sentinel_view(cfg, host, *port))
    }))
    .await;
    Ok(views
        .into_iter()
        .map(|v| v.ok().and_then(Result::ok))
        .collect())
}

/// `SENTINEL MASTER <name>` and `SENTINEL REPLICAS <name>` on the sentinel at `host:port`.
async fn sentinel_view(
    cfg: &RedisConfig,
    host: &str,
    port: u16,
) -> Result<SentinelView, CommandError> {
    let name = cfg.sentinel_master.as_deref().unwrap_or_default();
    let (master, replicas) = (["master", name], ["replicas", name]);
    let (fields, replicas): (HashMap<String, String>, Vec<HashMap<String, String>>) = futures_util::try_join!(
        ask(cfg, host, port, &master),
        ask(cfg, host, port, &replicas),
    )?;
    let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
    let flags = field("flags");
    Ok(SentinelView {
        master: format!("{}:{}", field("ip"), field("port")),
        failing_over: flags.contains("failover_in_progress"),
        master_down: flags.split(',').any(|f| f == "s_down" || f == "o_down"),
        replicas: replicas
            .iter()
            .map(|r| {
                let field = |name: &str| r.get(name).map(String::as_str).unwrap_or_default();
                let synced =
                    field("role-reported") == "slave" && field("master-link-status") == "ok";
                ReplicaView {
                    address: format!("{}:{}", field("ip"), field("port")),
                    down: !is_not_down(field("flags")),
                    promoted: field("flags").split(',').any(|f| f == "promoted"),
                    synced_to: synced
                        .then(|| format!("{}:{}", field("master-host"), field("master-port"))),
                }
            })
            .collect(),
    })
}

/// Whether a sentinel's flags for a server leave it a candidate for promotion: not found down
/// (`s_down`, `o_down`: silent for `down-after-milliseconds`). A server the sentinel is not
/// connected to yet (`disconnected`) is one: so is every server a failover has just listed,
/// the old master among them, until the sentinel's link to it is up, a moment later.
fn is_not_down(flags: &str) -> bool {
    !flags.split(',').any(|f| matches!(f, "s_down" | "o_down"))
}

/// With Sentinel: asks the sentinels every [`SENTINEL_WATCH`] which server is master, and
/// moves the connection when it is another than the one in use; at once when a sentinel
/// announces a switch (`+switch-master`), to the master it names. Until the connection moves,
/// this instance still confirms its held sessions on the deposed master, where another
/// instance's takeover on the new one is not seen: the Sentinel seed with two replicas saw a
/// holder serve a session for 0.55 s after the switch, while another instance already served
/// it from the new master (two holders at once). Ends with the connection.
pub(super) async fn watch_master(inner: Weak<Inner>) {
    let failovers = inner.upgrade().and_then(|i| i.failovers.clone());
    loop {
        let announced = match &failovers {
            Some(f) => tokio::select! {
                _ = tokio::time::sleep(SENTINEL_WATCH) => false,
                _ = f.switch_announced() => true,
            },
            None => {
                tokio::time::sleep(SENTINEL_WATCH).await;
                false
            }
        };
        let Some(inner) = inner.upgrade() else { return };
        let in_use = inner.master.lock().clone();
        // For a while after a switch announced, its new master is the one: a sentinel that has
        // not heard of the switch yet names the old one, and rebuilding for that (the rebuild
        // goes to the announced master anyway) replaced the connection at every poll until the
        // sentinels agreed.
        let named = match failovers.as_ref().and_then(|f| f.switched_to()) {
            Some(new) => Some(new),
            None => server_info(&inner.cfg)
                .await
                .ok()
                .map(|info| info.addr().to_string()),
        };
        if let Some(now) = named
            && in_use.is_some_and(|m| m != now)
        {
            let how = if announced {
                " (a switch announced)"
            } else {
                ""
            };
            inner.rebuild(format!("the sentinels name a new master, {now}{how}"));
        }
    }
}

/// From a `ROLE` answer: how many replicas a master has connected, or `None` when the server
/// is not a master.
pub(super) fn replicas_of_master(role: &redis::Value) -> Option<usize> {
    let redis::Value::Array(items) = role else {
        return None;
    };
    let is_master = match items.first() {
        Some(redis::Value::BulkString(b)) => b == b"master",
        Some(redis::Value::SimpleString(s)) => s == "master",
        _ => false,
    };
    match (is_master, items.get(2)) {
        (true, Some(redis::Value::Array(replicas))) => Some(replicas.len()),
        (true, _) => Some(0),
        (false, _) => None,
    }
}

/// From a master's `ROLE` answer: the `host:port` of each replica connected (synced).
pub(super) fn connected_replicas(role: &redis::Value) -> Vec<String> {
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    let redis::Value::Array(items) = role else {
        return Vec::new();
    };
    let Some(redis::Value::Array(replicas)) = items.get(2) else {
        return Vec::new();
    };
    replicas
        .iter()
        .filter_map(|r| match r {
            redis::Value::Array(f) => Some(format!("{}:{}", text(f.first()?)?, text(f.get(1)?)?)),
            _ => None,
        })
        .collect()
}

/// Fails unless the server `conn` talks to says it is a master (`ROLE`): right after a
/// failover, a sentinel may still name the old one.
pub(super) async fn check_master(conn: &mut ConnectionManager) -> Result<(), CommandError> {
    let role: redis::Value = redis::cmd("ROLE")
        .query_async(conn)
        .await
        .map_err(unavailable)?;
    let is_master = replicas_of_master(&role).is_some();
    if is_master {
        Ok(())
    } else {
        Err(CommandError::Unavailable(
            "the server the sentinels named is not a master (yet)".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::is_not_down;

    #[test]
    fn a_server_is_a_candidate_unless_a_sentinel_finds_it_down() {
        assert!(is_not_down("slave"));
        assert!(is_not_down("master"));
        assert!(is_not_down("slave,disconnected"), "not connected to yet");
        assert!(is_not_down("slave,promoted"));
        assert!(!is_not_down("s_down,slave"));
        assert!(!is_not_down("s_down,slave,disconnected"));
        assert!(!is_not_down("o_down,s_down,master"));
    }
}
