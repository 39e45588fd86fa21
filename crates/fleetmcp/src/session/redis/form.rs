//! The two forms of a stored record, and which one this instance writes.
//!
//! The *full* form carries the session's id twice: in the key (`mcp:session:<id>`) and in the
//! value (`session.id`). The *compact* form leaves `session.id` out of the value: the reader
//! takes the id from the key it read. For a 62-character minted id that is 70 bytes of JSON, and
//! a typical record (309 bytes in full) then fits jemalloc's 256-byte class instead of the
//! 320-byte one: 64 bytes of Redis memory a session (docs/BENCHMARKS.md, Memory).
//!
//! Rolling upgrade. Every version before this one (main before issue 37) requires
//! `session.id` and deletes a record whose `session.id` is not the id it asked for, as
//! invalid (`RedisSessionStore::get` there: `Ok(w) if w.session.id == id`, else `DEL`; the
//! orphan scanner's `get_many` drops it, then a `get` deletes it). A compact record read by such
//! an instance would end its session. So this version:
//!
//! * reads both forms: a record with `session.id` is checked against the key's id as before, one
//!   without is the key's session;
//! * writes the full form until it knows that every running instance of the fleet reads the
//!   compact one, then the compact form for the rest of its life ([`RecordForm`]). It knows
//!   from the heartbeats (distributed mode only: `fleet/record_form.rs`): each instance of this
//!   version says so in its own (`compactRecords: true`); a heartbeat without it is an older
//!   version's. Default mode has no heartbeat, so its instances cannot know who else reads
//!   their records, and keep the full form.
//!
//! What each version reads: this one, both forms; earlier ones, the full form only (which this
//! one writes while any of them beats). Downgrading a fleet that has switched to an earlier
//! version drops the sessions whose compact records an old instance reads (their clients
//! initialize again, as after an expiry).

use std::sync::atomic::{AtomicBool, Ordering};

/// Which form of the record this instance writes; shared by every user of one connection
/// (`RedisConn::shared`): the heartbeat switches it, the session store reads it.
#[derive(Debug, Default)]
pub(crate) struct RecordForm {
    compact: AtomicBool,
}

impl RecordForm {
    /// Whether records are written without `session.id`.
    pub(crate) fn compact(&self) -> bool {
        self.compact.load(Ordering::Relaxed)
    }

    /// From now on records are written without `session.id` (never switched back: the records
    /// already written compact would stay so anyway).
    pub(crate) fn write_compact(&self) {
        self.compact.store(true, Ordering::Relaxed);
    }
}
