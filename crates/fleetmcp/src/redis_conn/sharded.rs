//! Sharded pub/sub on a Redis Cluster: a message touches one shard, not every node.
//!
//! A classic `PUBLISH` on a cluster is sent by the node that runs it to every other node over the
//! cluster bus (5 bus messages on 3 masters with a replica each), whoever listens. `SPUBLISH`
//! (Redis 7.0) keeps it inside the shard that owns the channel's slot (1 bus message there: to
//! the master's replica), as one Redis with one replica would (1 replication message). Its
//! listeners subscribe on that shard's master, so a channel the whole fleet listens on puts all
//! its subscribers on one master: as classic pub/sub did here already (every subscriber on the
//! first configured node), and as one Redis does.
//!
//! The channels (see [the module's "Redis Cluster"](super#redis-cluster)):
//!
//! | channel | who listens | on a cluster of Redis ≥ 7 |
//! |---|---|---|
//! | `<haPrefix>notify:<nodeId>` (notifications for one session, drain requests; its subscription is the instance's presence) | that instance | sharded |
//! | `<haPrefix>drain-reply:<random>` (the answer to one drain request) | the operator's command | sharded |
//! | `<haPrefix>changes` (list changes, resource updates) | every instance | sharded once no listener is classic only ([`Broadcast`]) |
//! | `<taskPrefix>cancel:<taskId>`, `input:<taskId>` (rare) | every instance, by one pattern | classic: sharded pub/sub has no patterns |
//!
//! Which way, decided once per connection ([`PubSubMode`], logged once): sharded when Redis is
//! a cluster and every node asked (the masters at least) reports `redis_version` 7 or later in
//! `INFO server`; classic on
//! one server, with Sentinel (one server: a classic message touches it alone) and on an older
//! cluster, and while the versions cannot be read (asked again next time).
//!
//! Mixed fleets (a rolling upgrade of fleetmcp, or a node that refuses `SSUBSCRIBE` after all)
//! lose nothing:
//! - a sharded listener subscribes to its channel both ways (`SSUBSCRIBE` and `SUBSCRIBE`), on
//!   one RESP3 connection to the slot's master, so an older instance that only `PUBLISH`es
//!   still reaches it;
//! - a message for one listener is `SPUBLISH`ed, and `PUBLISH`ed instead only when nobody in
//!   the cluster listens on it sharded (an older listener): one message for a new listener,
//!   two for an old one, never two deliveries ([`RedisConn::publish_one`]);
//! - a message for every listener goes one way: `SPUBLISH` once every listener listens sharded
//!   (checked at most every 5 s while changes are published), else `PUBLISH`;
//! - presence is `PUBSUB SHARDNUMSUB` on the slot's master (one command), and, only when that
//!   finds nobody, the same on the master `CLUSTER SLOTS` names now (the cluster connection's
//!   map may be stale after a failover), then the classic `PUBSUB NUMSUB` (every master): an
//!   older instance is never taken for gone.
//!
//! A sharded subscription is lost when its connection drops (the master failed), or when Redis
//! unsubscribes it (`sunsubscribe`: the slot moved, or its master became a replica, as
//! `CLUSTER FAILOVER` does): the subscription's stream then ends, and its keeper subscribes
//! again (`fleet/subscription.rs`), on the master that owns the slot then. Messages published
//! meanwhile are lost, as on a classic reconnection.

use std::sync::atomic::Ordering;

use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{PushInfo, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::link::Link;
use super::{CommandError, RedisConn, unavailable};

/// Slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// How a channel one instance listens on is used (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PubSubMode {
    /// `PUBLISH` / `SUBSCRIBE` / `PUBSUB NUMSUB`.
    Classic,
    /// `SPUBLISH` / `SSUBSCRIBE` / `PUBSUB SHARDNUMSUB`, with the classic way kept beside it.
    Sharded,
}

const CLASSIC: u8 = 1;
const SHARDED: u8 = 2;

/// A key's (or a channel's) Redis Cluster slot: CRC16 (XMODEM) of its hash tag, or of the whole
/// key when it has none, modulo 16384.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % SLOTS
}

/// The lowest major version of `redis_version` in a set of `INFO server` answers; `None` when
/// one has none.
fn lowest_major(infos: &[String]) -> Option<u32> {
    infos
        .iter()
        .map(|info| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix("redis_version:"))
                .and_then(|v| v.split('.').next())
                .and_then(|major| major.trim().parse::<u32>().ok())
        })
        .collect::<Option<Vec<u32>>>()?
        .into_iter()
        .min()
}

/// Every text in `value` (an `INFO` answer of one node is one; of every node, a map of them).
fn texts(value: Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(b) => out.push(String::from_utf8_lossy(&b).into_owned()),
        Value::VerbatimString { text, .. } => out.push(text),
        Value::SimpleString(s) => out.push(s),
        Value::Map(pairs) => pairs.into_iter().for_each(|(_, v)| texts(v, out)),
        Value::Array(items) => items.into_iter().for_each(|v| texts(v, out)),
        _ => {}
    }
}

/// The master of `slot` in a `CLUSTER SLOTS` answer: its host and port.
fn master_in(slots: &Value, slot: u16) -> Option<(String, u16)> {
    masters_in(slots)
        .into_iter()
        .find(|(first, last, _)| (*first..=*last).contains(&slot))
        .map(|(_, _, master)| master)
}

/// The slot ranges of a `CLUSTER SLOTS` answer, each with its master's host and port.
fn masters_in(slots: &Value) -> Vec<(u16, u16, (String, u16))> {
    let Value::Array(ranges) = slots else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(items) = range else {
                return None;
            };
            let first: u16 = redis::from_redis_value_ref(items.first()?).ok()?;
            let last: u16 = redis::from_redis_value_ref(items.get(1)?).ok()?;
            let Value::Array(master) = items.get(2)? else {
                return None;
            };
            let host: String = redis::from_redis_value_ref(master.first()?).ok()?;
            let port: u16 = redis::from_redis_value_ref(master.get(1)?).ok()?;
            Some((first, last, (host, port)))
        })
        .collect()
}

/// Which master served each slot when one `CLUSTER SLOTS` was read ([`RedisConn::slot_masters`]):
/// to send one script the keys of many slots that one master holds.
pub(crate) struct SlotMasters(Vec<(u16, u16, String)>);

impl SlotMasters {
    /// The `host:port` of the master of `slot`, if one served it.
    pub(crate) fn of(&self, slot: u16) -> Option<&str> {
        self.0
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, master)| master.as_str())
    }
}

/// Whether Redis refused a command it does not know (a server older than the command).
fn unknown_command(e: &redis::RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

impl RedisConn {
    /// How this connection's channels for one instance go; decided once (see the module's
    /// comment), and logged then.
    pub(crate) async fn pubsub_mode(&self) -> PubSubMode {
        match self.inner.pubsub_mode.load(Ordering::Acquire) {
            CLASSIC => return PubSubMode::Classic,
            SHARDED => return PubSubMode::Sharded,
            _ => {}
        }
        let (mode, why) = if !self.inner.cfg.is_cluster() {
            (
                PubSubMode::Classic,
                "one server: a PUBLISH reaches one server anyway".to_string(),
            )
        } else {
            // Every node, replicas too: a replica promoted later serves the slot.
            // Every node the cluster connection reaches (the `redis` crate's `AllNodes`; the
            // masters at least): a replica that does not know `SSUBSCRIBE` once promoted is met
            // by the fallbacks (`subscribe_sharded` listens classically then, senders publish
            // classically when `SPUBLISH` is unknown or reached nobody).
            let every = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
            let mut info = redis::cmd("INFO");
            info.arg("server");
            let answer = self
                .routed(info, every)
                .await
                .map(|v| {
                    let mut all = Vec::new();
                    texts(v, &mut all);
                    all
                })
                .ok()
                .filter(|all| !all.is_empty());
            let Some(infos) = answer else {
                // Not decided: classic for now (a sharded listener hears it too), asked again.
                return PubSubMode::Classic;
            };
            match lowest_major(&infos) {
                Some(v) if v >= 7 => (
                    PubSubMode::Sharded,
                    format!(
                        "every one of the {} nodes asked runs Redis {v} or later: messages stay in one shard",
                        infos.len()
                    ),
                ),
                Some(v) => (
                    PubSubMode::Classic,
                    format!("a node runs Redis {v}, older than 7.0 (no SPUBLISH)"),
                ),
                None => (
                    PubSubMode::Classic,
                    "a node's INFO names no redis_version".to_string(),
                ),
            }
        };
        let code = match mode {
            PubSubMode::Classic => CLASSIC,
            PubSubMode::Sharded => SHARDED,
        };
        if self
            .inner
            .pubsub_mode
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::info!(mode = ?mode, "Redis pub/sub for one instance's channels: {mode:?} ({why})");
        }
        mode
    }

    /// Runs `cmd` where `routing` says, on a cluster (on one server: there).
    async fn routed(&self, cmd: redis::Cmd, routing: RoutingInfo) -> Result<Value, CommandError> {
        let (cmd, routing) = (&cmd, &routing);
        self.inner
            .bounded(|link| async move {
                match link {
                    Link::Cluster(mut c) => c.route_command(cmd.clone(), routing.clone()).await,
                    mut single => cmd.query_async::<Value>(&mut single).await,
                }
            })
            .await
    }

    /// Sends `payload` to the one listener of `channel` (an instance's channel, a reply
    /// channel); how many received it (0: nobody listens). Sharded first when the mode is, then
    /// classic if nobody listens sharded (see the module's comment).
    ///
    /// `SPUBLISH` and `PUBLISH` count only the receivers on the node that ran them, so a 0 is
    /// checked before it is believed (a rare case: nobody listens, or the cluster connection's
    /// slot map was stale): on the slot's master now ([`RedisConn::shard_listeners_now`]). After
    /// a failover the `redis` crate may still route the slot to its old master, now a replica of
    /// the same shard: Redis runs `SPUBLISH` there, and it reaches the shard's subscribers all
    /// the same (publishing again classically would deliver the message twice); a node of
    /// another shard answers `MOVED`, which the crate follows.
    pub(crate) async fn publish_one(
        &self,
        channel: &str,
        payload: &str,
    ) -> Result<i64, CommandError> {
        let count_everywhere = |what: &'static str| self.count_everywhere(what, channel);
        if self.pubsub_mode().await == PubSubMode::Sharded {
            let mut spublish = redis::cmd("SPUBLISH");
            spublish.arg(channel).arg(payload);
            match self.run::<i64>(spublish).await {
                Ok(n) if n > 0 => return Ok(n),
                Ok(_) => {
                    let listening = self.shard_listeners_now(channel).await?;
                    if listening > 0 {
                        return Ok(listening);
                    }
                }
                Err(CommandError::Unavailable(e))
                    if e.to_ascii_lowercase().contains("unknown command") => {}
                Err(e) => return Err(e),
            }
        }
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel).arg(payload);
        let n = self.run::<i64>(publish).await?;
        if n > 0 || !self.inner.cfg.is_cluster() {
            return Ok(n);
        }
        // A cluster sends a classic message to every node: its listener may be on another.
        count_everywhere("NUMSUB").await
    }

    /// Listeners of `channel`, a channel one instance listens on (its presence): sharded ones
    /// on the master of its slot, and when there are none the classic ones (an older release).
    pub(crate) async fn listeners_of(&self, channel: &str) -> Result<i64, CommandError> {
        if self.pubsub_mode().await == PubSubMode::Sharded {
            let mut count = redis::cmd("PUBSUB");
            count.arg("SHARDNUMSUB").arg(channel);
            let master = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot_of(channel.as_bytes()),
                SlotAddr::Master,
            )));
            let n = first_count(self.routed(count, master).await?);
            if n > 0 {
                return Ok(n);
            }
            let n = self.shard_listeners_now(channel).await?;
            if n > 0 {
                return Ok(n);
            }
        }
        self.count_everywhere("NUMSUB", channel).await
    }

    /// The masters of every slot now, as `CLUSTER SLOTS` says (one command).
    pub(crate) async fn slot_masters(&self) -> Result<SlotMasters, CommandError> {
        let slots: Value = self.run(redis::cmd("CLUSTER").arg("SLOTS").clone()).await?;
        Ok(SlotMasters(
            masters_in(&slots)
                .into_iter()
                .map(|(first, last, (host, port))| (first, last, format!("{host}:{port}")))
                .collect(),
        ))
    }

    /// The master that serves `channel`'s slot now, as `CLUSTER SLOTS` says (one command):
    /// how to connect to it, and its `host:port` for messages.
    async fn slot_master(
        &self,
        channel: &str,
    ) -> Result<(redis::ConnectionInfo, String), CommandError> {
        let slots: Value = self.run(redis::cmd("CLUSTER").arg("SLOTS").clone()).await?;
        let (host, port) = master_in(&slots, slot_of(channel.as_bytes())).ok_or_else(|| {
            CommandError::Unavailable(format!("no master serves the slot of {channel}"))
        })?;
        let info = self
            .inner
            .cfg
            .server_connection_info(&host, port)
            .map_err(config_error)?;
        Ok((info, format!("{host}:{port}")))
    }

    /// Sharded listeners of `channel` on the master that serves its slot now, asked on a
    /// connection of its own: the cluster connection's slot map may be stale after a failover
    /// (the `redis` crate learns of one from a `MOVED`, and `SPUBLISH` or `SHARDNUMSUB` sent to
    /// the demoted master are answered there, not moved), and reaches no node it has not
    /// connected to (a promoted replica). Only when a count said 0: a rare case.
    async fn shard_listeners_now(&self, channel: &str) -> Result<i64, CommandError> {
        let cfg = &self.inner.cfg;
        let (master, _) = self.slot_master(channel).await?;
        let client = cfg.client_for(master).map_err(config_error)?;
        let bound = cfg.connect_timeout() + cfg.command_timeout();
        let ask = async {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(unavailable)?;
            redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(channel)
                .query_async::<Value>(&mut conn)
                .await
                .map_err(unavailable)
        };
        match tokio::time::timeout(bound, ask).await {
            Ok(answer) => answer.map(first_count),
            Err(_) => Err(CommandError::Timeout(bound.as_millis() as u64)),
        }
    }

    /// A dedicated RESP3 connection to the master of `channel`'s slot, subscribed to it both
    /// ways (`SSUBSCRIBE`, and `SUBSCRIBE` for older publishers); its pushes.
    pub(super) async fn sharded_subscription(
        &self,
        channel: &str,
    ) -> Result<
        (
            redis::aio::MultiplexedConnection,
            UnboundedReceiver<PushInfo>,
        ),
        CommandError,
    > {
        let cfg = &self.inner.cfg;
        let (master, address) = self.slot_master(channel).await?;
        let client = cfg.resp3_client_for(master).map_err(config_error)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(cfg.connect_timeout()))
            .set_response_timeout(Some(cfg.command_timeout()))
            .set_push_sender(tx);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(unavailable)?;
        conn.subscribe(channel).await.map_err(unavailable)?;
        match redis::cmd("SSUBSCRIBE")
            .arg(channel)
            .query_async::<Value>(&mut conn)
            .await
        {
            Ok(_) => {}
            // A node older than its peers said (a rolling upgrade of Redis): classic alone,
            // which every publisher falls back to.
            Err(e) if unknown_command(&e) => {
                tracing::warn!(%channel, "{address} does not know SSUBSCRIBE; listening classically");
            }
            Err(e) => return Err(unavailable(e)),
        }
        // Still the master: a replica (the slot map read was stale) would take the sharded
        // subscription too, where `SHARDNUMSUB` on the master cannot count it. Checked after
        // subscribing: a master demoted since unsubscribes it (`sunsubscribe`), which ends
        // the subscription.
        let role: Vec<Value> = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let first = role
            .first()
            .and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        if first.as_deref() != Some("master") {
            return Err(CommandError::Unavailable(format!(
                "{address} no longer serves the slot of {channel} as its master"
            )));
        }
        Ok((conn, rx))
    }
}

/// How long a [`Broadcast`]'s verdict (does an older listener remain?) holds.
const BROADCAST_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Publishing on a channel every instance listens on (the changes channel): sharded once no
/// listener is classic only (an older release), else classic, which every listener hears.
pub(crate) struct Broadcast {
    channel: String,
    /// When it was last checked, and whether every listener then listened sharded.
    verdict: parking_lot::Mutex<Option<(std::time::Instant, bool)>>,
}

impl Broadcast {
    pub(crate) fn new(channel: String) -> Self {
        Self {
            channel,
            verdict: parking_lot::Mutex::new(None),
        }
    }

    /// Publishes `payload` one way. On a sharded cluster, whether to `SPUBLISH` is checked at
    /// most every [`BROADCAST_RECHECK`] (`PUBSUB NUMSUB` against `SHARDNUMSUB`, every master:
    /// one command each), and only while changes are published: an idle fleet pays nothing.
    /// An older instance that joins meanwhile misses at most that long of changes.
    pub(crate) async fn publish(
        &self,
        redis: &RedisConn,
        payload: &str,
    ) -> Result<(), CommandError> {
        let sharded = redis.pubsub_mode().await == PubSubMode::Sharded && {
            let known = *self.verdict.lock();
            match known {
                Some((at, verdict)) if at.elapsed() < BROADCAST_RECHECK => verdict,
                _ => {
                    let verdict = redis.every_listener_sharded(&self.channel).await?;
                    *self.verdict.lock() = Some((std::time::Instant::now(), verdict));
                    verdict
                }
            }
        };
        let mut publish = redis::cmd(if sharded { "SPUBLISH" } else { "PUBLISH" });
        publish.arg(&self.channel).arg(payload);
        redis.run::<i64>(publish).await.map(|_| ())
    }
}

impl RedisConn {
    /// Whether every listener of `channel` listens sharded: none listens classically only.
    async fn every_listener_sharded(&self, channel: &str) -> Result<bool, CommandError> {
        let classic = self.count_everywhere("NUMSUB", channel).await?;
        let sharded = self.count_everywhere("SHARDNUMSUB", channel).await?;
        Ok(classic <= sharded)
    }

    /// `PUBSUB <what> <channel>` (`NUMSUB` or `SHARDNUMSUB`) on every node, summed: the
    /// `redis` crate routes both so and adds up the counts.
    async fn count_everywhere(&self, what: &str, channel: &str) -> Result<i64, CommandError> {
        let mut count = redis::cmd("PUBSUB");
        count.arg(what).arg(channel);
        self.run::<Value>(count).await.map(first_count)
    }
}

/// The count in a `PUBSUB NUMSUB` / `SHARDNUMSUB` answer for one channel (a flat array, or a
/// map as a cluster's combined answer is); 0 when it names none.
fn first_count(answer: Value) -> i64 {
    match answer {
        Value::Array(items) => items
            .get(1)
            .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
            .unwrap_or(0),
        Value::Map(pairs) => pairs
            .first()
            .and_then(|(_, v)| redis::from_redis_value_ref::<i64>(v).ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// A configuration that cannot name a server, as a command's error.
fn config_error(e: crate::redis_config::RedisConfigError) -> CommandError {
    CommandError::Unavailable(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_every_node() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nredis_mode:cluster\r\n");
        assert_eq!(lowest_major(&[info("7.0.15"), info("7.2.4")]), Some(7));
        assert_eq!(lowest_major(&[info("7.0.15"), info("6.2.14")]), Some(6));
        assert_eq!(lowest_major(&[info("7.0.15"), "# Server\r\n".into()]), None);
    }

    #[test]
    fn a_slot_s_master_is_found_in_cluster_slots() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let range = |a: i64, b: i64, port: i64| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(b),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]),
            ])
        };
        let slots = Value::Array(vec![range(0, 5460, 7001), range(5461, 16383, 7002)]);
        assert_eq!(master_in(&slots, 0), Some(("127.0.0.1".into(), 7001)));
        assert_eq!(master_in(&slots, 12659), Some(("127.0.0.1".into(), 7002)));
    }

    #[test]
    fn counts_are_read_from_either_shape() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(first_count(Value::Array(vec![bulk("c"), Value::Int(2)])), 2);
        assert_eq!(first_count(Value::Map(vec![(bulk("c"), Value::Int(3))])), 3);
        assert_eq!(first_count(Value::Array(vec![])), 0);
    }
}
