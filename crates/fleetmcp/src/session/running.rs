//! The requests a session's client has running, by raw JSON-RPC id: what
//! `notifications/cancelled` and the session's end stop.
//!
//! Shaped for an idle session's memory and a busy one's speed: a client that runs one request
//! at a time (the usual case) has it kept in place, and no table is ever made; the second
//! request running at once makes a table, which is kept while the session is used (no
//! allocation per request) and dropped by the idle sweep ([`Running::release_idle`]).

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// A session's running requests and their tokens.
#[derive(Default)]
pub(super) struct Running {
    /// One running request, kept in place.
    first: Option<(Arc<str>, CancellationToken)>,
    /// The others, in a table made when a second request runs beside the first: each id's
    /// token, and how many requests run under it (more than one when a client sent an id again
    /// while its request ran).
    #[allow(clippy::box_collection)] // the box is the point: 8 bytes in place, not 48
    more: Option<Box<Table>>,
}

/// Running requests by id: the token they run under, and how many run under it.
type Table = HashMap<Arc<str>, (CancellationToken, u32)>;

impl Running {
    /// How many ids have requests running.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.as_ref().map_or(0, |m| m.len())
    }

    /// How many requests run, an id sent again while its request runs counted each time: what
    /// `limits.max_inflight_per_session` bounds (each is a handler running).
    pub fn total(&self) -> usize {
        match &self.more {
            None => usize::from(self.first.is_some()),
            Some(more) => {
                let table: usize = more.values().map(|(_, n)| *n as usize).sum();
                usize::from(self.first.is_some()) + table
            }
        }
    }

    /// Whether a request with this id runs.
    #[cfg(test)]
    pub fn contains(&self, id: &str) -> bool {
        self.is_first(id) || self.more.as_ref().is_some_and(|m| m.contains_key(id))
    }

    fn is_first(&self, id: &str) -> bool {
        self.first.as_ref().is_some_and(|(k, _)| &**k == id)
    }

    /// Adds request `id` under `token`, and gives back the token it runs under: `token`, or,
    /// when a request with that id already runs, that request's token, shared. A client sends
    /// an id again while its request runs when it retries a call whose answer it lost (a
    /// relay's `503`, a broken hop while the holder runs on): the two are one call, cancelled
    /// together by `notifications/cancelled` and by the session's end, and the id is kept
    /// until both have finished, so the one that ends first does not leave the other out of
    /// reach.
    ///
    /// Also gives back the id as kept here, for the request to name itself with when it
    /// finishes: shared, so that a request costs one copy of its id, not two (issue 23).
    pub fn insert(&mut self, id: &str, token: CancellationToken) -> (CancellationToken, Arc<str>) {
        if self.is_first(id)
            && let Some((k, shared)) = self.first.take()
        {
            // Counted in the table: the place in the struct has no room for a count.
            self.more
                .get_or_insert_with(Default::default)
                .insert(k.clone(), (shared.clone(), 2));
            return (shared, k);
        }
        if let Some(more) = self.more.as_mut()
            && let Some((k, _)) = more.get_key_value(id)
        {
            // Looked up twice: the std map lends a key and its value mutably by no one call,
            // and an id sent again while its request runs is rare.
            let k = k.clone();
            if let Some((shared, n)) = more.get_mut(id) {
                *n += 1;
                return (shared.clone(), k);
            }
        }
        let key: Arc<str> = id.into();
        if self.first.is_none() {
            self.first = Some((key.clone(), token.clone()));
        } else {
            self.more
                .get_or_insert_with(Default::default)
                .insert(key.clone(), (token.clone(), 1));
        }
        (token, key)
    }

    /// One request `id` has finished: the id is dropped once none runs under it.
    pub fn finish(&mut self, id: &str) {
        if self.is_first(id) {
            self.first = None;
            return;
        }
        let Some(more) = self.more.as_mut() else {
            return;
        };
        if let Some((_, n)) = more.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                more.remove(id);
            }
        }
    }

    /// Removes id `id` whatever runs under it, giving its token back (to be cancelled).
    pub fn remove(&mut self, id: &str) -> Option<CancellationToken> {
        if self.is_first(id) {
            return self.first.take().map(|(_, t)| t);
        }
        self.more.as_mut()?.remove(id).map(|(t, _)| t)
    }

    /// Every running request's token.
    pub fn tokens(&self) -> impl Iterator<Item = &CancellationToken> {
        let first = self.first.iter().map(|(_, t)| t);
        first.chain(self.more.iter().flat_map(|m| m.values().map(|(t, _)| t)))
    }

    /// Drops the table if no request in it runs (the idle sweep).
    pub fn release_idle(&mut self) {
        if self.more.as_ref().is_some_and(|m| m.is_empty()) {
            self.more = None;
        }
    }

    /// Whether a table was made (and not dropped yet).
    #[cfg(test)]
    pub fn has_table(&self) -> bool {
        self.more.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_at_a_time_makes_no_table_and_more_make_one_kept_until_idle() {
        let mut r = Running::default();
        for id in ["1", "2", "3"] {
            r.insert(id, CancellationToken::new());
            assert!(r.contains(id) && r.len() == 1);
            assert!(r.remove(id).is_some());
        }
        assert!(!r.has_table(), "one at a time: no table");
        let (a, b, c) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        r.insert("a", a.clone());
        r.insert("b", b.clone());
        r.insert("c", c.clone());
        assert_eq!(r.len(), 3);
        assert!(r.has_table());
        assert_eq!(r.tokens().count(), 3);
        // The first's place freed, a request in the table is still found there, not twice.
        assert!(r.remove("a").is_some());
        r.insert("b", b.clone());
        assert_eq!(r.len(), 2);
        assert!(r.remove("b").is_some() && !r.contains("b"));
        assert!(r.remove("c").is_some());
        assert!(r.remove("c").is_none());
        assert_eq!(r.len(), 0);
        assert!(r.has_table(), "kept while the session is used");
        r.release_idle();
        assert!(!r.has_table(), "dropped once idle");
        // An id sent again while its request runs: one call, under one token.
        let (old, new) = (CancellationToken::new(), CancellationToken::new());
        let (first, key) = r.insert("x", old.clone());
        let (again, same) = r.insert("x", new.clone());
        assert!(Arc::ptr_eq(&key, &same), "one copy of the id");
        assert_eq!(r.len(), 1);
        assert!(!new.is_cancelled());
        r.remove("x").expect("runs").cancel();
        assert!(first.is_cancelled() && again.is_cancelled() && old.is_cancelled());
    }

    /// The earlier of two requests under one id finishing dropped the id, and the later one
    /// was out of reach of `notifications/cancelled` and of the session's end.
    #[test]
    fn an_id_sent_again_stays_until_both_requests_under_it_finish() {
        for in_place in [true, false] {
            let mut r = Running::default();
            if !in_place {
                r.insert("other", CancellationToken::new());
            }
            let (token, key) = r.insert("x", CancellationToken::new());
            let (_, same) = r.insert("x", CancellationToken::new());
            assert!(Arc::ptr_eq(&key, &same) && &*key == "x");
            r.finish("x");
            assert!(
                r.contains("x"),
                "the second still runs (in place: {in_place})"
            );
            assert_eq!(r.tokens().filter(|t| !t.is_cancelled()).count(), r.len());
            for t in r.tokens() {
                t.cancel();
            }
            assert!(token.is_cancelled(), "the session's end reaches it");
            r.finish("x");
            assert!(!r.contains("x"), "dropped once both finished");
            r.finish("x");
            assert_eq!(r.len(), usize::from(!in_place));
        }
    }
}
