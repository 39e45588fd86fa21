//! The instance's budget of connections (`http.max_connections`, fitted at start to the
//! open-files limit): one place per socket the instance holds for a request, whichever way it
//! goes. A connection a client opened takes one for its life (the listener, `server/listener.rs`);
//! so does each socket the relay opens to a session's holder, in use or idle in its pool
//! (`fleet/relay/`), since a relayed request holds two descriptors on the relaying instance:
//! its client's connection and its hop. Counting both in one budget is what keeps a flood of
//! relayed streams below the open-files limit, with the descriptors the health reserve needs
//! still free. (The relay also counts its requests in flight, `ha.relay_max_connections`, with
//! a [`Connections`] of its own.)

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The places of the budget, shared by everything that holds a socket for a request. Cheap to
/// clone; a place is given back when its [`OwnedSemaphorePermit`] drops.
#[derive(Clone, Debug)]
pub struct Connections {
    places: Arc<Semaphore>,
    max: usize,
}

impl Connections {
    /// A budget of `max` places (at least one).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            places: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// How many places there are.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many places are taken now.
    pub fn in_use(&self) -> usize {
        self.max.saturating_sub(self.places.available_permits())
    }

    /// A place now, if one is free (the listener: a connection over the budget is not waited
    /// for).
    pub fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.places.clone().try_acquire_owned().ok()
    }

    /// A place within `wait`, if one comes free by then (places are handed out in the order
    /// they were asked for).
    pub async fn take_within(&self, wait: Duration) -> Option<OwnedSemaphorePermit> {
        match tokio::time::timeout(wait, self.places.clone().acquire_owned()).await {
            Ok(Ok(place)) => Some(place),
            // Timed out, or closed (never: the semaphore is not closed).
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn places_are_counted_given_back_and_waited_for_within_a_bound() {
        let budget = Connections::new(2);
        let a = budget.try_take().expect("a first place");
        let b = budget.take_within(Duration::from_millis(10)).await;
        assert!(b.is_some());
        assert_eq!(budget.in_use(), 2);
        assert!(budget.try_take().is_none(), "over the budget");
        let began = tokio::time::Instant::now();
        assert!(
            budget
                .take_within(Duration::from_millis(50))
                .await
                .is_none(),
            "nothing came free"
        );
        assert!(began.elapsed() >= Duration::from_millis(50));
        // A place given back while someone waits goes to them.
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.take_within(Duration::from_secs(5)).await })
        };
        tokio::task::yield_now().await;
        drop(a);
        let got = waiter.await.expect("the waiter");
        assert!(got.is_some());
        assert_eq!(budget.in_use(), 2);
        drop(got);
        drop(b);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(Connections::new(0).max(), 1);
    }
}
