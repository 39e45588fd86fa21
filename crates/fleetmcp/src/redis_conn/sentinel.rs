//! Redis Sentinel: which server is master, asked of the sentinels when a connection opens and
//! every [`SENTINEL_WATCH`] after, and whether a server still is one (`ROLE`), so the
//! connection follows a failover without a restart.

use std::sync::Weak;
use std::time::Duration;

use redis::aio::ConnectionManager;

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
        let ask = async {
            let mut conn = sentinel_connection(cfg, &host, port).await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
                .map_err(unavailable)
        };
        match tokio::time::timeout(bound, ask).await {
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

/// A connection to the sentinel at `host:port` (its own credentials and TLS), unbounded: the
/// callers bound what they ask.
async fn sentinel_connection(
    cfg: &RedisConfig,
    host: &str,
    port: u16,
) -> Result<redis::aio::MultiplexedConnection, CommandError> {
    let config =
        |e: crate::redis_config::RedisConfigError| CommandError::Unavailable(e.to_string());
    let client = cfg
        .client_for(cfg.sentinel_connection_info(host, port).map_err(config)?)
        .map_err(config)?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(unavailable)
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

/// `SENTINEL MASTER <name>` and `SENTINEL REPLICAS <name>` on the sentinel at `host:port`.
pub(super) async fn sentinel_view(
    cfg: &RedisConfig,
    host: &str,
    port: u16,
) -> Result<SentinelView, CommandError> {
    let mut conn = sentinel_connection(cfg, host, port).await?;
    let name = cfg.sentinel_master.as_deref().unwrap_or_default();
    let fields: std::collections::HashMap<String, String> = redis::cmd("SENTINEL")
        .arg("master")
        .arg(name)
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
        .arg("replicas")
        .arg(name)
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
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
/// moves the connection when it is another than the one in use. Ends with the connection.
pub(super) async fn watch_master(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(SENTINEL_WATCH).await;
        let Some(inner) = inner.upgrade() else { return };
        let Ok(info) = server_info(&inner.cfg).await else {
            continue;
        };
        let now = info.addr().to_string();
        let in_use = inner.master.lock().clone();
        if in_use.is_some_and(|m| m != now) {
            inner.rebuild(format!("the sentinels name a new master, {now}"));
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
