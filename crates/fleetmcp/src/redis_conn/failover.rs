//! With Sentinel: what the sentinels say of the master and its replicas, kept current for the
//! durable writes (`durable.rs`) without asking them per write. Two sources:
//!
//! - every sentinel's events, on a subscription to each (`PSUBSCRIBE *`): a failover is
//!   announced (`+try-failover`, `+elected-leader`, `+failover-state-*`, `+selected-slave`,
//!   `+promoted-slave`, `+odown`) before the replica is promoted, and its end (`+switch-master`,
//!   `+failover-end`, `-failover-abort-*`, `-odown`) names the old master;
//! - each sentinel's view (`SENTINEL MASTER`, `SENTINEL REPLICAS`), asked every
//!   [`REFRESH_EVERY`] and at once after an event.
//!
//! A write takes the count of failover events before it is sent and compares it once confirmed:
//! a failover announced in between refuses it. An event reaches this process about a
//! millisecond after a sentinel publishes it on loopback; the leader publishes `+try-failover`
//! two or three of its 100 ms ticks before it sends `REPLICAOF NO ONE` to the replica it
//! picked, so the event is in before the promotion it announces, unless this process was
//! paused in between (then the count of replicas, below, is what refuses the write).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::sentinel::{ReplicaView, SentinelView, sentinel_views};
use super::{CommandError, Inner, unavailable};
use crate::redis_config::RedisConfig;

/// How often each sentinel's view is asked again without an event.
const REFRESH_EVERY: Duration = Duration::from_millis(1000);
/// A view older than this is not relied on: a write needs a majority of the sentinels naming
/// its master within it (a process cut off from the majority stops writing that long after).
const VIEW_FRESH_FOR: Duration = Duration::from_millis(2000);
/// How long a failover announced with no end seen is taken as under way (a sentinel whose end
/// event did not reach us: its view, refreshed, tells the rest).
const UNDER_WAY_FOR: Duration = Duration::from_secs(10);
/// First delay before a lost subscription to a sentinel is opened again.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(500);
/// A subscription silent this long is opened again.
const RESUBSCRIBE_IDLE: Duration = Duration::from_secs(30);

/// Events that announce a failover (or a master found down by a quorum, its first step).
fn starts_failover(event: &str) -> bool {
    matches!(
        event,
        "+try-failover" | "+elected-leader" | "+selected-slave" | "+promoted-slave" | "+odown"
    ) || event.starts_with("+failover-state-")
}

/// Events that end one.
fn ends_failover(event: &str) -> bool {
    matches!(
        event,
        "+switch-master" | "+failover-end" | "+failover-end-for-timeout" | "-odown"
    ) || event.starts_with("-failover-abort")
}

/// How long after a sentinel announced a switch the connection goes straight to the master it
/// named, rather than to the one the first sentinel to answer names (the others learn of the
/// switch from the leader's hello messages, up to a second or two later).
const SWITCH_FOLLOWED_FOR: Duration = Duration::from_secs(10);

/// How long after a failover the servers it re-pointed at the new master are not waited for
/// until they have synced with it (see [`Switch`]).
const EXCUSE_FOR: Duration = Duration::from_secs(60);

/// The last failover seen end (`+switch-master`): the servers it re-pointed at the new master
/// (the old master, which the sentinels convert 8 s or more later, and every other replica,
/// which resyncs in full when it took anything from the old master after the promotion: the
/// sentinels' own hello messages are enough) hold nothing the new master took until they have
/// synced with it, seconds later. Waiting for them would refuse every write for that long
/// (with Redis 7's defaults, 5 s of `repl-diskless-sync-delay` for a replica, 13 to 16 s for
/// the old master); not waiting leaves a write the new master takes meanwhile to it and the
/// replicas that have synced: what a second failure in that window can lose (RELIABILITY.md,
/// F8). A replica of the new master seen synced (in a sentinel's view, or connected in `ROLE`)
/// is waited for from then on.
#[derive(Clone, Debug, PartialEq)]
struct Switch {
    /// `host:port` of the new master.
    new: String,
    /// `host:port` of the old one.
    old: String,
    at: Instant,
    /// Replicas of `new` seen synced since.
    synced: std::collections::BTreeSet<String>,
}

impl Switch {
    /// Whether `replica` of `master` is not waited for (see the type's comment).
    fn excuses(&self, master: &str, replica: &ReplicaView) -> bool {
        self.new == master
            && self.at.elapsed() < EXCUSE_FOR
            && !self.synced.contains(&replica.address)
            && replica.synced_to.as_deref() != Some(master)
    }
}

#[derive(Default)]
struct State {
    /// Per sentinel (configured order): its last view, and when it was taken.
    views: Vec<Option<(Instant, SentinelView)>>,
    /// A failover announced and not seen to end, since when.
    under_way: Option<Instant>,
    switch: Option<Switch>,
}

/// What the sentinels say, kept current (see the module's comment). One per connection.
#[derive(Default)]
pub(super) struct Failovers {
    /// Failover events seen (start and end), for a write to compare before and after.
    events: AtomicU64,
    state: parking_lot::Mutex<State>,
    /// Wakes the refresher at once.
    refresh: tokio::sync::Notify,
    /// Wakes the connection's watch of the master at once when a sentinel announces a switch
    /// (`sentinel::watch_master`).
    switched: tokio::sync::Notify,
    /// One round of asking the sentinels at a time: writers that need one wait for the round
    /// under way.
    asking: tokio::sync::Mutex<()>,
}

/// How many replicas a write to a master must be confirmed by, as the sentinels see it now.
pub(super) enum Needed {
    /// This many (at least one).
    Replicas(usize),
    /// None: the sentinels count no replica of it that a failover could promote (each is down,
    /// or re-pointed at it by the failover that made it master and not synced yet, [`Switch`]).
    /// The write is confirmed by a majority of the sentinels instead (`durable.rs`).
    Alone,
}

impl Failovers {
    /// The count of failover events seen so far.
    pub(super) fn events(&self) -> u64 {
        self.events.load(Ordering::Acquire)
    }

    /// The new master (`host:port`) of the last switch a sentinel announced, for
    /// [`SWITCH_FOLLOWED_FOR`] after it.
    pub(super) fn switched_to(&self) -> Option<String> {
        let state = self.state.lock();
        let switch = state.switch.as_ref()?;
        (switch.at.elapsed() < SWITCH_FOLLOWED_FOR).then(|| switch.new.clone())
    }

    /// Resolves when a sentinel announces a switch (or one was announced since the last call).
    pub(super) async fn switch_announced(&self) {
        self.switched.notified().await
    }

    /// Whether a failover was announced and not seen to end.
    pub(super) fn under_way(&self) -> bool {
        self.state
            .lock()
            .under_way
            .is_some_and(|at| at.elapsed() < UNDER_WAY_FOR)
    }

    /// How many replicas a write to `server` (`host:port`) must be confirmed by: every replica
    /// a sentinel naming it master counts as one a failover could promote (not down), but those
    /// the failover that made it master re-pointed at it, until they have synced ([`Switch`]):
    /// Sentinel
    /// promotes the replica with the largest replication offset among those it can reach, so a
    /// write every such replica holds survives a failover, and one that a replica lacks may
    /// not (the replica picked may be the one that lacks it, on an offset a second old). Fails
    /// while a failover is under way (announced, or flagged by a sentinel), or unless a
    /// majority of the sentinels name `server` in views younger than [`VIEW_FRESH_FOR`] (asked
    /// again once when not).
    pub(super) async fn needed(
        &self,
        cfg: &RedisConfig,
        server: &str,
    ) -> Result<Needed, CommandError> {
        if self.under_way() {
            return Err(CommandError::NotDurable(format!(
                "a sentinel announced a failover of the master written to ({server}) and no end of it yet"
            )));
        }
        let sentinels = cfg
            .sentinel_addresses()
            .map_err(|e| CommandError::Unavailable(e.to_string()))?
            .len();
        let mut asked = false;
        loop {
            let (naming, needed) = self.count(server)?;
            if naming * 2 > sentinels {
                return Ok(match needed {
                    0 => Needed::Alone,
                    n => Needed::Replicas(n),
                });
            }
            // Too few views naming it: old ones, or the sentinels changing their mind (a switch
            // being told around): asked again once.
            if asked {
                return Err(CommandError::NotDurable(format!(
                    "{naming} of {sentinels} sentinels, asked within {} ms, name the server written to ({server}) master: not a majority",
                    VIEW_FRESH_FOR.as_millis()
                )));
            }
            self.refresh_now(cfg).await?;
            asked = true;
        }
    }

    /// Of the views younger than [`VIEW_FRESH_FOR`]: how many name `server` master, and the
    /// most replicas one of those counts up; fails when one is failing it over.
    fn count(&self, server: &str) -> Result<(usize, usize), CommandError> {
        let state = self.state.lock();
        let mut naming = 0;
        let mut needed: usize = 0;
        for (at, view) in state.views.iter().flatten() {
            if view.master != server || at.elapsed() >= VIEW_FRESH_FOR {
                continue;
            }
            naming += 1;
            if view.failing_over {
                return Err(CommandError::NotDurable(format!(
                    "a sentinel is failing over the master written to ({server})"
                )));
            }
            // A sentinel that finds the master down is not a failover yet (that takes a quorum,
            // and its leader announces it): the replicas' confirmation covers one that comes.
            // A write without replicas is refused for it (`alone_agreed`).
            needed = needed.max(counted(view, state.switch.as_ref()));
        }
        Ok((naming, needed))
    }

    /// Whether a write to `server` may go without replicas by `views` (fresh, asked of every
    /// sentinel): each one that answered names it, none is failing it over or finds it down,
    /// and none counts a replica of it a failover could promote; but the leader of the
    /// failover that promoted `server`, still finishing it, is not asked. `Ok(n)`: `n`
    /// sentinels agree.
    pub(super) fn alone_agreed(
        &self,
        server: &str,
        views: &[SentinelView],
    ) -> Result<usize, String> {
        let switch = self.state.lock().switch.clone();
        let mut agreeing = 0;
        for view in views {
            // The leader of the failover that made `server` master, still re-pointing the other
            // replicas at it (until they have synced, or its failover-timeout): it names the
            // old master until it is done, and objects to nothing here.
            let finishing = view.failing_over
                && view
                    .replicas
                    .iter()
                    .any(|r| r.promoted && r.address == server);
            if finishing {
                continue;
            }
            if view.failing_over {
                return Err(format!(
                    "a sentinel is failing over the master written to ({server})"
                ));
            }
            if view.master != server {
                return Err(format!(
                    "a sentinel names another master ({}) than the one written to ({server})",
                    view.master
                ));
            }
            if view.master_down {
                return Err(format!(
                    "a sentinel finds the master written to ({server}) down"
                ));
            }
            let n = counted(view, switch.as_ref());
            if n > 0 {
                return Err(format!(
                    "the master written to ({server}) has no replica connected, and a sentinel finds {n} of its replicas up (not down: a failover could promote one without this write)"
                ));
            }
            agreeing += 1;
        }
        Ok(agreeing)
    }

    /// Asks every sentinel's view now (within the command timeout) and keeps what answered.
    async fn refresh_now(&self, cfg: &RedisConfig) -> Result<(), CommandError> {
        let wanted = Instant::now();
        let _round = self.asking.lock().await;
        let newest = self
            .state
            .lock()
            .views
            .iter()
            .flatten()
            .map(|(at, _)| *at)
            .max();
        if newest.is_some_and(|at| at >= wanted) {
            // A round that began after this one was wanted has answered meanwhile.
            return Ok(());
        }
        let asked = Instant::now();
        self.keep(sentinel_views(cfg).await?, asked);
        Ok(())
    }

    /// Keeps the views asked at `now` (`None`: that sentinel did not answer; its last view
    /// stays, to age), and notes the replicas they show synced with the new master of the last
    /// switch.
    pub(super) fn keep(&self, views: Vec<Option<SentinelView>>, now: Instant) {
        let mut state = self.state.lock();
        if state.views.len() < views.len() {
            state.views.resize_with(views.len(), || None);
        }
        let mut synced = Vec::new();
        for (slot, view) in state.views.iter_mut().zip(views) {
            if let Some(view) = view {
                synced.extend(
                    view.replicas
                        .iter()
                        .filter(|r| r.synced_to.as_deref() == Some(view.master.as_str()))
                        .map(|r| (view.master.clone(), r.address.clone())),
                );
                *slot = Some((now, view));
            }
        }
        if let Some(switch) = state.switch.as_mut() {
            for (master, replica) in synced {
                if master == switch.new {
                    switch.synced.insert(replica);
                }
            }
        }
        if state
            .under_way
            .is_some_and(|at| at.elapsed() >= UNDER_WAY_FOR)
        {
            state.under_way = None;
        }
    }

    /// Notes the replicas `master` has connected (its `ROLE`): synced with it.
    pub(super) fn connected(&self, master: &str, replicas: &[String]) {
        let mut state = self.state.lock();
        if let Some(switch) = state.switch.as_mut().filter(|s| s.new == master) {
            switch.synced.extend(replicas.iter().cloned());
        }
    }

    /// One event published by a sentinel (`channel` its name, `payload` its text), for the
    /// master named `name`.
    fn on_event(&self, name: &str, channel: &str, payload: &str) {
        let words: Vec<&str> = payload.split_whitespace().collect();
        // `+switch-master <name> <old ip> <old port> <new ip> <new port>`; the others name the
        // instance (`<type> <name> <ip> <port>`, then `@ <master name> <ip> <port>` unless it
        // is the master).
        let ours = if channel == "+switch-master" {
            words.first() == Some(&name)
        } else {
            words.get(1) == Some(&name)
                || words.iter().skip_while(|w| **w != "@").nth(1) == Some(&name)
        };
        if !ours {
            return;
        }
        if starts_failover(channel) {
            let mut state = self.state.lock();
            state.under_way = Some(Instant::now());
            // A new failover: a replica still excused could be the one it promotes.
            state.switch = None;
            drop(state);
            self.events.fetch_add(1, Ordering::AcqRel);
            tracing::debug!(event = channel, payload, "a sentinel announced a failover");
        } else if ends_failover(channel) {
            let mut state = self.state.lock();
            state.under_way = None;
            if channel == "+switch-master" && words.len() >= 5 {
                let new = format!("{}:{}", words[3], words[4]);
                // Each sentinel announces the same switch: the first one seen starts the window.
                if state.switch.as_ref().is_none_or(|s| s.new != new) {
                    state.switch = Some(Switch {
                        old: format!("{}:{}", words[1], words[2]),
                        new,
                        at: Instant::now(),
                        synced: Default::default(),
                    });
                    self.switched.notify_one();
                }
            }
            drop(state);
            self.events.fetch_add(1, Ordering::AcqRel);
            tracing::debug!(
                event = channel,
                payload,
                "a sentinel announced a failover's end"
            );
        }
        self.refresh.notify_one();
    }
}

/// The replicas in `view` a write must reach: those not down, but those the last switch
/// excuses ([`Switch`]).
fn counted(view: &SentinelView, switch: Option<&Switch>) -> usize {
    view.replicas
        .iter()
        .filter(|r| !r.down)
        .filter(|r| !switch.is_some_and(|s| s.excuses(&view.master, r)))
        .count()
}

/// Starts the subscriptions to every sentinel and the refresher, for as long as `inner` lives.
pub(super) fn watch(inner: &Arc<Inner>) {
    let Some(failovers) = inner.failovers.clone() else {
        return;
    };
    let Ok(sentinels) = inner.cfg.sentinel_addresses() else {
        return;
    };
    for (host, port) in sentinels {
        tokio::spawn(subscribe(
            Arc::downgrade(inner),
            failovers.clone(),
            host,
            port,
        ));
    }
    tokio::spawn(refresh(Arc::downgrade(inner), failovers));
}

/// Asks every sentinel's view every [`REFRESH_EVERY`], or at once after an event.
async fn refresh(inner: Weak<Inner>, failovers: Arc<Failovers>) {
    loop {
        let _ = tokio::time::timeout(REFRESH_EVERY, failovers.refresh.notified()).await;
        let Some(inner) = inner.upgrade() else { return };
        let cfg = inner.cfg.clone();
        drop(inner);
        let _ = failovers.refresh_now(&cfg).await;
    }
}

/// The events of the sentinel at `host:port`, kept subscribed (opened again after a loss).
async fn subscribe(inner: Weak<Inner>, failovers: Arc<Failovers>, host: String, port: u16) {
    let mut delay = RESUBSCRIBE_AFTER;
    loop {
        let Some(cfg) = inner.upgrade().map(|i| i.cfg.clone()) else {
            return;
        };
        let name = cfg.sentinel_master.clone().unwrap_or_default();
        let bound = cfg.connect_timeout() + cfg.command_timeout();
        let opened = tokio::time::timeout(bound, async {
            let info = cfg
                .sentinel_connection_info(&host, port)
                .map_err(|e| CommandError::Unavailable(e.to_string()))?;
            let client = cfg
                .client_for(info)
                .map_err(|e| CommandError::Unavailable(e.to_string()))?;
            let mut pubsub = client.get_async_pubsub().await.map_err(unavailable)?;
            pubsub.psubscribe("*").await.map_err(unavailable)?;
            Ok::<_, CommandError>(pubsub)
        })
        .await;
        let mut pubsub = match opened {
            Ok(Ok(p)) => p,
            _ => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        delay = RESUBSCRIBE_AFTER;
        // What happened while this sentinel was not listened to is in its view.
        failovers.refresh.notify_one();
        let mut messages = pubsub.on_message();
        let mut heard = Instant::now();
        loop {
            match tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
                Ok(Some(msg)) => {
                    heard = Instant::now();
                    let channel = msg.get_channel_name().to_string();
                    let payload: String = msg.get_payload().unwrap_or_default();
                    failovers.on_event(&name, &channel, &payload);
                }
                Ok(None) => break,
                Err(_) if inner.strong_count() == 0 => return,
                // Nothing for a while: a connection whose peer vanished without closing it
                // would stay silent for good, so it is opened again (the view says what
                // happened meanwhile).
                Err(_) if heard.elapsed() >= RESUBSCRIBE_IDLE => break,
                Err(_) => {}
            }
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_conn::sentinel::ReplicaView;

    fn replica(address: &str, down: bool, synced_to: Option<&str>) -> ReplicaView {
        ReplicaView {
            address: address.into(),
            down,
            synced_to: synced_to.map(String::from),
            promoted: false,
        }
    }

    fn view(master: &str, replicas: Vec<ReplicaView>) -> SentinelView {
        SentinelView {
            master: master.into(),
            failing_over: false,
            master_down: false,
            replicas,
        }
    }

    #[test]
    fn every_replica_up_is_counted_but_those_a_switch_repointed_until_synced() {
        let two = view(
            "h:2",
            vec![
                replica("h:3", false, Some("h:2")),
                replica("h:1", false, None),
            ],
        );
        assert_eq!(
            counted(&two, None),
            2,
            "without a switch seen, every one counts"
        );
        let mut switch = Switch {
            new: "h:2".into(),
            old: "h:1".into(),
            at: Instant::now(),
            synced: Default::default(),
        };
        assert_eq!(
            counted(&two, Some(&switch)),
            1,
            "the old master, not synced"
        );
        let syncing = view(
            "h:2",
            vec![replica("h:3", false, None), replica("h:1", false, None)],
        );
        assert_eq!(counted(&syncing, Some(&switch)), 0, "both resyncing");
        switch.synced.insert("h:3".into());
        assert_eq!(
            counted(&syncing, Some(&switch)),
            1,
            "a replica once seen synced is waited for: it may be leaving for a promotion"
        );
        let down = view("h:2", vec![replica("h:3", true, None)]);
        assert_eq!(counted(&down, None), 0, "a replica down cannot be promoted");
        let other = view("h:9", two.replicas.clone());
        assert_eq!(
            counted(&other, Some(&switch)),
            2,
            "another master's replicas count"
        );
        switch.at = Instant::now() - EXCUSE_FOR;
        assert_eq!(counted(&syncing, Some(&switch)), 2, "the excuse ends");
    }

    #[test]
    fn events_start_and_end_failovers_of_this_master_only() {
        let f = Failovers::default();
        f.on_event("m", "+try-failover", "master other 127.0.0.1 7000");
        assert!(!f.under_way(), "another master's");
        f.on_event("m", "+try-failover", "master m 127.0.0.1 7000");
        assert!(f.under_way());
        assert_eq!(f.events(), 1);
        f.on_event(
            "m",
            "+selected-slave",
            "slave 127.0.0.1:7001 127.0.0.1 7001 @ m 127.0.0.1 7000",
        );
        assert_eq!(f.events(), 2);
        f.on_event("m", "+switch-master", "m 127.0.0.1 7000 127.0.0.1 7001");
        assert!(!f.under_way());
        let switch = f.state.lock().switch.clone().expect("a switch");
        assert_eq!(
            (switch.old.as_str(), switch.new.as_str()),
            ("127.0.0.1:7000", "127.0.0.1:7001")
        );
        f.connected("127.0.0.1:7001", &["127.0.0.1:7002".into()]);
        assert!(
            f.state
                .lock()
                .switch
                .as_ref()
                .is_some_and(|s| s.synced.contains("127.0.0.1:7002"))
        );
        f.on_event(
            "m",
            "+sdown",
            "slave 127.0.0.1:7000 127.0.0.1 7000 @ m 127.0.0.1 7001",
        );
        assert_eq!(f.events(), 3, "a replica found down announces no failover");
        f.on_event("m", "+try-failover", "master m 127.0.0.1 7001");
        assert!(
            f.state.lock().switch.is_none(),
            "a new failover ends every excuse"
        );
        f.on_event("m", "+try-failover", "master m 127.0.0.1 7001");
        assert!(
            f.state.lock().switch.is_none(),
            "a new failover ends every excuse"
        );
    }
}
