//! The requests a session's client has running, by raw JSON-RPC id: what
//! `notifications/cancelled` and the session's end stop.
//!
//! Shaped for an idle session's memory and a busy one's speed: a client that runs one request
//! at a time (the usual case) has it kept in place, and no table is ever made; the second
//! request running at once makes a table, which is kept while the session is used (no
//! allocation per request) and dropped by the idle sweep ([`Running::release_idle`]).

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

/// A session's running requests and their tokens.
#[derive(Default)]
pub(super) struct Running {
    /// One running request, kept in place.
    first: Option<(Box<str>, CancellationToken)>,
    /// The others, in a table made when a second request runs beside the first.
    #[allow(clippy::box_collection)] // the box is the point: 8 bytes in place, not 48
    more: Option<Box<HashMap<Box<str>, CancellationToken>>>,
}

impl Running {
    /// How many requests run.
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.as_ref().map_or(0, |m| m.len())
    }

    /// Whether a request with this id runs.
    pub fn contains(&self, id: &str) -> bool {
        self.is_first(id) || self.more.as_ref().is_some_and(|m| m.contains_key(id))
    }

    fn is_first(&self, id: &str) -> bool {
        self.first.as_ref().is_some_and(|(k, _)| &**k == id)
    }

    /// Adds request `id`, or gives the one running under that id this token (a client that
    /// reuses an id while its request runs: the later request is the one its id names).
    pub fn insert(&mut self, id: &str, token: CancellationToken) {
        if let Some((k, t)) = &mut self.first
            && &**k == id
        {
            *t = token;
            return;
        }
        let in_table = self.more.as_ref().is_some_and(|m| m.contains_key(id));
        if self.first.is_none() && !in_table {
            self.first = Some((id.into(), token));
        } else {
            self.more
                .get_or_insert_with(Default::default)
                .insert(id.into(), token);
        }
    }

    /// Removes request `id`, giving its token back.
    pub fn remove(&mut self, id: &str) -> Option<CancellationToken> {
        if self.is_first(id) {
            return self.first.take().map(|(_, t)| t);
        }
        self.more.as_mut()?.remove(id)
    }

    /// Every running request's token.
    pub fn tokens(&self) -> impl Iterator<Item = &CancellationToken> {
        let first = self.first.iter().map(|(_, t)| t);
        first.chain(self.more.iter().flat_map(|m| m.values()))
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
        // An id reused while its request runs names the later request.
        let (old, new) = (CancellationToken::new(), CancellationToken::new());
        r.insert("x", old);
        r.insert("x", new.clone());
        assert_eq!(r.len(), 1);
        r.remove("x").expect("runs").cancel();
        assert!(new.is_cancelled());
    }
}
