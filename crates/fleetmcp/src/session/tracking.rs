//! Client-side caching of the records of held sessions: how an instance serves a held session's
//! requests without a Redis round trip each, and still sees at once that the record was
//! deleted, expired or claimed elsewhere.
//!
//! One dedicated RESP3 connection has `CLIENT TRACKING ON`: every record this instance checks on
//! it, Redis remembers, and when any other connection changes that key (a `DEL` on another
//! instance, a claim, the key's expiry) Redis pushes an `invalidate` message on it. The tracker
//! turns those into [`Invalidation`]s for the sessions layer, which then checks that session
//! again on its next request. Its own writes (the refresh inside the check script) do not count
//! (`NOLOOP`), and the check script refreshes *before* it reads, so its read is what stays
//! tracked.
//!
//! Whatever Redis may have failed to tell us voids every confirmation: when the connection is
//! lost or replaced, and when Redis flushes its tracking table, the tracker sends
//! [`Invalidation::All`]; until it is connected again checks run on the shared connection and
//! confirm nothing.

use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::store::Invalidation;
use crate::redis_config::RedisConfig;

/// The tracking connection of one instance.
pub(super) struct Tracker {
    cfg: RedisConfig,
    conn: ArcSwapOption<MultiplexedConnection>,
    /// Where invalidations go (the sessions layer); when its receiver is gone, the tracker stops.
    out: UnboundedSender<Invalidation>,
    /// `<prefix>session:`: what an invalidated key starts with.
    prefix: String,
    /// Changes when the instance's shared connection moves to another server (a failover):
    /// the tracking connection follows it.
    replaced: tokio::sync::watch::Receiver<u64>,
}

/// Pause before connecting again: 100 ms doubling to 5 s.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

impl Tracker {
    /// Starts connecting in the background; returns the tracker and the invalidations it will
    /// report.
    pub fn start(
        cfg: RedisConfig,
        replaced: tokio::sync::watch::Receiver<u64>,
    ) -> (Arc<Self>, UnboundedReceiver<Invalidation>) {
        let (out, rx) = unbounded_channel();
        let tracker = Arc::new(Self {
            prefix: cfg.session_key_prefix(),
            cfg,
            replaced,
            conn: ArcSwapOption::empty(),
            out,
        });
        tokio::spawn(run(Arc::downgrade(&tracker)));
        (tracker, rx)
    }

    /// The tracking connection, while it is up.
    pub fn conn(&self) -> Option<MultiplexedConnection> {
        self.conn.load_full().map(|c| (*c).clone())
    }

    /// A connection with tracking on, and the receiver of its push messages.
    async fn open(&self) -> Result<(MultiplexedConnection, UnboundedReceiver<PushInfo>), String> {
        let info = crate::redis_conn::server_info(&self.cfg)
            .await
            .map_err(|e| e.to_string())?;
        let client = self.cfg.resp3_client_for(info).map_err(|e| e.to_string())?;
        let (tx, rx) = unbounded_channel();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.cfg.connect_timeout()))
            .set_response_timeout(Some(self.cfg.command_timeout()))
            .set_push_sender(tx);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| e.to_string())?;
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("NOLOOP")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok((conn, rx))
    }

    /// Reports the invalidations of one connection until it is lost.
    async fn pump(&self, mut pushes: UnboundedReceiver<PushInfo>) {
        let mut replaced = self.replaced.clone();
        replaced.mark_unchanged();
        loop {
            let push = tokio::select! {
                p = pushes.recv() => p,
                // The shared connection moved (a failover): this one reconnects too.
                Ok(()) = replaced.changed() => return,
                // Nobody listens any more (the server stopped): let the connection go.
                _ = self.out.closed() => return,
            };
            let Some(push) = push else { return };
            match push.kind {
                PushKind::Invalidate => match push.data.first() {
                    Some(Value::Array(keys)) => {
                        for key in keys {
                            let key = match key {
                                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                                Value::SimpleString(s) => s.clone(),
                                _ => continue,
                            };
                            if let Some(id) = key.strip_prefix(&self.prefix) {
                                let _ = self.out.send(Invalidation::Key(id.to_string()));
                            }
                        }
                    }
                    // A null key list: Redis flushed its tracking table.
                    _ => {
                        let _ = self.out.send(Invalidation::All);
                    }
                },
                PushKind::Disconnection => return,
                _ => {}
            }
        }
    }
}

/// Connects, reports, and connects again when the connection is lost, until the tracker is
/// dropped or nobody listens to it.
async fn run(tracker: Weak<Tracker>) {
    let mut delay = RETRY_MIN;
    loop {
        let Some(t) = tracker.upgrade() else { return };
        if t.out.is_closed() {
            return;
        }
        match t.open().await {
            Ok((conn, pushes)) => {
                delay = RETRY_MIN;
                // Nothing confirmed before this connection is known to Redis's table.
                let _ = t.out.send(Invalidation::All);
                t.conn.store(Some(Arc::new(conn)));
                tracing::debug!("session records are tracked (client-side caching on)");
                t.pump(pushes).await;
                t.conn.store(None);
                let _ = t.out.send(Invalidation::All);
                tracing::warn!(
                    "the tracking connection to Redis was lost; every held session is checked again until it is back"
                );
            }
            Err(e) => {
                tracing::debug!(error = %e, retry_in_ms = delay.as_millis() as u64, "the tracking connection to Redis could not be opened");
            }
        }
        drop(t);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}
