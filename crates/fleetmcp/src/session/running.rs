//! The requests a session's client has running, by raw JSON-RPC id: what
//! `notifications/cancelled` and the session's end stop.
//!
//! Shaped for an idle session's memory and a busy one's speed: a client that runs one request
//! at a time (the usual case) has it kept in place, and no table is ever made; the second
//! request running at once makes a table, which is kept while the session is used (no
//! allocation per request) and dropped by the idle sweep ([`Running::release_idle`]).
//!
//! A request is counted when it is let in ([`Running::admit`]), but entered by its id only
//! when something asks for its cancellation token (its handler waits, streams, or reads the
//! token: `RequestContext::cancellation`): most calls finish in their first poll, and neither
//! an entry nor a token is made for them (issue 40). A `notifications/cancelled` that finds no
//! entry while requests run that have none is kept ([`Running::cancel`]), so the request it
//! names, entered later, starts cancelled.

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
    /// Also the ids cancelled before their request was entered, under a cancelled token and a
    /// count of 0 (dropped once no request runs).
    #[allow(clippy::box_collection)] // the box is the point: 8 bytes in place, not 48
    more: Option<Box<Table>>,
    /// How many requests run, entered or not, an id sent again while its request runs
    /// counted each time: what `limits.max_inflight_per_session` bounds (each is a handler
    /// running).
    count: u32,
}

/// Running requests by id: the token they run under, and how many run under it.
type Table = HashMap<Arc<str>, (CancellationToken, u32)>;

/// The longest id whose cancellation is kept for a request not entered yet: a kept id is the
/// notification's copy, so without a bound a client could park its largest body in the table
/// once for every request running (a longer id's request, cancelled in its first poll, runs
/// on, as the protocol lets a receiver do with a cancellation it cannot act on).
const MAX_KEPT_ID_BYTES: usize = 256;

impl Running {
    /// How many ids have requests running.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.as_ref().map_or(0, |m| m.len())
    }

    /// Counts one more request unless `max` run already.
    pub fn admit(&mut self, max: usize) -> bool {
        if self.count as usize >= max {
            return false;
        }
        self.count += 1;
        true
    }

    /// One request let in by [`Running::admit`] has ended; entered as `id`, if it was.
    pub fn end(&mut self, id: Option<&str>) {
        if let Some(id) = id {
            self.finish(id);
        }
        self.count = self.count.saturating_sub(1);
        if self.count == 0
            && let Some(more) = self.more.as_mut()
        {
            // No request runs: what is left are ids cancelled before their request was
            // entered, which no request can take up now.
            more.clear();
        }
    }

    /// Cancels request `id`: its token, when it was entered; otherwise, while requests run
    /// that were not entered (one of them may be `id`, in its first poll), the id is kept
    /// under a cancelled token, which the request finds when it is entered. True when the
    /// request was found.
    ///
    /// Kept ids are at most as many as the requests not entered when each was kept (each
    /// can be named by one cancellation only), so never more than
    /// `limits.max_inflight_per_session`, each at most [`MAX_KEPT_ID_BYTES`]: a flood of
    /// cancellations naming nothing keeps nothing more.
    pub fn cancel(&mut self, id: &str) -> bool {
        if let Some(token) = self.remove(id) {
            token.cancel();
            return true;
        }
        let (entered, kept) = self.tally();
        if id.len() <= MAX_KEPT_ID_BYTES && entered + kept < self.count as usize {
            let token = CancellationToken::new();
            token.cancel();
            self.more
                .get_or_insert_with(Default::default)
                .insert(id.into(), (token, 0));
        }
        false
    }

    /// How many entered requests run (an id sent again while its request runs counted each
    /// time), and how many cancellations are kept for requests not entered.
    fn tally(&self) -> (usize, usize) {
        let mut entered = usize::from(self.first.is_some());
        let mut kept = 0;
        for (_, n) in self.more.iter().flat_map(|m| m.values()) {
            entered += *n as usize;
            kept += usize::from(*n == 0);
        }
        (entered, kept)
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
    /// when a request with that id already runs (or was cancelled before it was entered: see
    /// [`Running::cancel`]), that request's token, shared. A client sends
    /// an id again while its request runs when it retries a call whose answer it lost (a
    /// relay's `503`, a broken hop while the holder runs on): the two are one call, cancelled
    /// together by `notifications/cancelled` and by the session's end, and the id is kept
    /// until both have finished, so the one that ends first does not leave the other out of
    /// reach.
    ///
    /// The id is kept as the request's own copy, shared (`CallKeyParts::raw_id`): a request
    /// costs one copy of its id, not two (issue 23).
    pub fn insert(&mut self, id: &Arc<str>, token: CancellationToken) -> CancellationToken {
        if self.is_first(id)
            && let Some((k, shared)) = self.first.take()
        {
            // Counted in the table: the place in the struct has no room for a count.
            self.more
                .get_or_insert_with(Default::default)
                .insert(k, (shared.clone(), 2));
            return shared;
        }
        if let Some((shared, n)) = self.more.as_mut().and_then(|m| m.get_mut(&**id)) {
            *n += 1;
            return shared.clone();
        }
        if self.first.is_none() {
            self.first = Some((id.clone(), token.clone()));
        } else {
            self.more
                .get_or_insert_with(Default::default)
                .insert(id.clone(), (token.clone(), 1));
        }
        token
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
        // A count of 0: a cancellation kept for a request not entered (see `cancel`).
        if let Some((_, n)) = more.get_mut(id)
            && *n > 0
        {
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

    fn id(s: &str) -> Arc<str> {
        s.into()
    }

    #[test]
    fn one_request_at_a_time_makes_no_table_and_more_make_one_kept_until_idle() {
        let mut r = Running::default();
        for id in ["1", "2", "3"] {
            r.insert(&Arc::from(id), CancellationToken::new());
            assert!(r.contains(id) && r.len() == 1);
            assert!(r.remove(id).is_some());
        }
        assert!(!r.has_table(), "one at a time: no table");
        let (a, b, c) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        r.insert(&id("a"), a.clone());
        r.insert(&id("b"), b.clone());
        r.insert(&id("c"), c.clone());
        assert_eq!(r.len(), 3);
        assert!(r.has_table());
        assert_eq!(r.tokens().count(), 3);
        // The first's place freed, a request in the table is still found there, not twice.
        assert!(r.remove("a").is_some());
        r.insert(&id("b"), b.clone());
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
        let first = r.insert(&id("x"), old.clone());
        let again = r.insert(&id("x"), new.clone());
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
                r.insert(&id("other"), CancellationToken::new());
            }
            let token = r.insert(&id("x"), CancellationToken::new());
            r.insert(&id("x"), CancellationToken::new());
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

    /// A request is counted when let in and entered only when its token is asked for; a
    /// `notifications/cancelled` that comes before the entry (the request in its first poll)
    /// still reaches it, and nothing of it is kept once no request runs.
    #[test]
    fn a_request_cancelled_before_it_is_entered_starts_cancelled() {
        let mut r = Running::default();
        assert!(r.admit(2) && r.admit(2) && !r.admit(2), "two at most");
        assert!(!r.cancel("x"), "not entered yet");
        let token = r.insert(&id("x"), CancellationToken::new());
        assert!(token.is_cancelled(), "entered after its cancellation");
        r.end(Some("x"));
        assert!(!r.cancel("y"), "nothing entered under y");
        r.end(None);
        assert!(
            r.len() == 0,
            "no request runs: the kept cancellation is dropped"
        );
        assert!(r.admit(1));
        let later = r.insert(&id("y"), CancellationToken::new());
        assert!(
            !later.is_cancelled(),
            "a cancellation kept no longer than its requests ran"
        );
        assert!(r.cancel("y") && later.is_cancelled());
        r.end(Some("y"));
        assert!(!r.cancel("z") && r.len() == 0, "none runs: nothing kept");
    }

    /// Cancellations naming nothing, sent while requests run that are not entered, keep no
    /// more ids than there are such requests, and no long one.
    #[test]
    fn kept_cancellations_are_bounded_by_the_requests_not_entered() {
        let mut r = Running::default();
        assert!(r.admit(10) && r.admit(10) && r.admit(10));
        r.insert(&id("entered"), CancellationToken::new());
        for n in 0..1_000 {
            assert!(!r.cancel(&n.to_string()));
        }
        assert_eq!(
            r.len(),
            1 + 2,
            "the entered one and two kept, of 1,000 sent"
        );
        r.end(Some("entered"));
        r.end(None);
        r.end(None);
        assert_eq!(r.len(), 0, "none runs: nothing kept");
        assert!(r.admit(10));
        let long = "x".repeat(MAX_KEPT_ID_BYTES + 1);
        assert!(
            !r.cancel(&long) && !r.contains(&long),
            "a long id is not kept"
        );
        let short = "x".repeat(MAX_KEPT_ID_BYTES);
        assert!(!r.cancel(&short) && r.contains(&short), "one that fits is");
    }
}
