//! Work handed off the caller's path (a session's standalone-stream appends, the fleet
//! channels' messages) done by a few worker tasks, each fed by a queue bounded in count and in
//! bytes. A burst makes queued items, not one task each; a worker stuck on its store (Redis
//! not answering) makes its queue stop at its bound, and what comes past it is dropped,
//! counted and logged: these messages are notifications, best effort, and the caller never
//! waits. Items with the same key go to the same lane, so one session's messages keep their
//! order.

use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;

/// What one lane holds at most: queued items, and the bytes they carry (the item a worker is
/// on counts until it is done). One item larger than `bytes` is still taken by an empty lane,
/// so a large message is not refused for ever.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    pub count: usize,
    pub bytes: usize,
}

type Work<T> = Arc<dyn Fn(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// `lanes` workers (started on first use, ended when this is dropped), each with its queue.
pub(crate) struct Lanes<T> {
    /// What the lanes carry, for the log.
    what: &'static str,
    bound: Bound,
    lanes: Box<[Lane<T>]>,
    work: Work<T>,
    /// Items dropped at the bound since start.
    dropped: AtomicU64,
}

struct Lane<T> {
    tx: OnceLock<mpsc::Sender<(T, usize)>>,
    bytes: Arc<AtomicUsize>,
}

impl<T: Send + 'static> Lanes<T> {
    /// `lanes` lanes of `bound` each, whose workers run `work` on one item at a time.
    pub fn new<F, Fut>(what: &'static str, lanes: usize, bound: Bound, work: F) -> Self
    where
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let lanes = (0..lanes.max(1))
            .map(|_| Lane {
                tx: OnceLock::new(),
                bytes: Arc::new(AtomicUsize::new(0)),
            })
            .collect();
        Self {
            what,
            bound,
            lanes,
            work: Arc::new(move |item| Box::pin(work(item))),
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues `item` (`size` bytes) on the lane of `key`, never waiting; `false` when it was
    /// dropped (the lane is full in count or bytes, or there is no runtime to work it).
    pub fn push(&self, key: &str, item: T, size: usize) -> bool {
        let n = self.lanes.len();
        let lane = &self.lanes[(foldhash::fast::FixedState::default().hash_one(key) as usize) % n];
        let Some(tx) = self.sender(lane) else {
            return self.drop_one("no runtime to work it");
        };
        let before = lane.bytes.fetch_add(size, Ordering::AcqRel);
        if before > 0 && before + size > self.bound.bytes {
            lane.bytes.fetch_sub(size, Ordering::AcqRel);
            return self.drop_one("its queue holds its most bytes");
        }
        match tx.try_send((item, size)) {
            Ok(()) => true,
            Err(e) => {
                lane.bytes.fetch_sub(size, Ordering::AcqRel);
                self.drop_one(match e {
                    mpsc::error::TrySendError::Full(_) => "its queue holds its most messages",
                    mpsc::error::TrySendError::Closed(_) => "its worker stopped",
                })
            }
        }
    }

    /// Items dropped at the bound since start.
    #[cfg(test)]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The lane's sender, its worker started on first use (inside a runtime only).
    fn sender<'a>(&self, lane: &'a Lane<T>) -> Option<&'a mpsc::Sender<(T, usize)>> {
        if let Some(tx) = lane.tx.get() {
            return Some(tx);
        }
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(lane.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(self.bound.count.max(1));
            rt.spawn(run(rx, lane.bytes.clone(), self.work.clone()));
            tx
        }))
    }

    /// Counts a dropped item; logged at the first drops, then every 1,024th (a flood of drops
    /// must not become a flood of log lines).
    fn drop_one(&self, why: &str) -> bool {
        let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if total.is_power_of_two() || total.is_multiple_of(1024) {
            tracing::warn!(
                dropped_total = total,
                "dropped a message of the {}: {why} (its worker is behind, e.g. on a store that does not answer)",
                self.what
            );
        }
        false
    }
}

/// One lane's worker: one item at a time, until every sender is gone.
async fn run<T>(mut rx: mpsc::Receiver<(T, usize)>, bytes: Arc<AtomicUsize>, work: Work<T>) {
    while let Some((item, size)) = rx.recv().await {
        work(item).await;
        bytes.fetch_sub(size, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes whose work waits for `gate` and then counts into `done`.
    fn gated(
        lanes: usize,
        bound: Bound,
    ) -> (Lanes<u32>, Arc<tokio::sync::Semaphore>, Arc<AtomicU64>) {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let (g, d) = (gate.clone(), done.clone());
        let lanes = Lanes::new("test messages", lanes, bound, move |_: u32| {
            let (g, d) = (g.clone(), d.clone());
            async move {
                if let Ok(p) = g.acquire().await {
                    p.forget();
                }
                d.fetch_add(1, Ordering::Relaxed);
            }
        });
        (lanes, gate, done)
    }

    async fn eventually(what: &str, f: impl Fn() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("not within 5 s: {what}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_on_a_stuck_worker_makes_no_task_and_stops_at_the_count() {
        let metrics = tokio::runtime::Handle::current().metrics();
        let tasks_before = metrics.num_alive_tasks();
        let (lanes, gate, done) = gated(
            4,
            Bound {
                count: 16,
                bytes: 1 << 20,
            },
        );
        let n = 10_000u32;
        let taken = (0..n)
            .filter(|i| lanes.push(&format!("session-{}", i % 50), *i, 10))
            .count() as u64;
        // At most the queue and the item its worker holds, per lane.
        assert!(taken <= 4 * 17, "{taken} taken");
        assert_eq!(lanes.dropped(), u64::from(n) - taken);
        let tasks = metrics.num_alive_tasks() - tasks_before;
        assert!(tasks <= 4, "{tasks} tasks for a burst of {n}");
        // Once the store answers, what was taken is done: nothing queued is lost.
        gate.add_permits(n as usize);
        eventually("every item taken is worked", || {
            done.load(Ordering::Relaxed) == taken
        })
        .await;
        drop(lanes);
        eventually("the workers end with their lanes", || {
            metrics.num_alive_tasks() <= tasks_before
        })
        .await;
    }

    #[tokio::test]
    async fn a_lane_stops_at_its_bytes() {
        let (lanes, gate, done) = gated(
            1,
            Bound {
                count: 1000,
                bytes: 10_000,
            },
        );
        let taken = (0..100).filter(|i| lanes.push("s", *i, 1_000)).count();
        assert_eq!(taken, 10, "10 items of 1,000 bytes in 10,000");
        // An item larger than the bound is taken by an empty lane only.
        assert!(!lanes.push("s", 0, 50_000));
        gate.add_permits(1000);
        eventually("the lane, empty again, takes the large item", || {
            done.load(Ordering::Relaxed) == 10 && lanes.push("s", 0, 50_000)
        })
        .await;
    }
}
