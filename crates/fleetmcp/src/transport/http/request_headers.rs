//! The few headers the checks in front of an MCP route judge a request by, read once into a
//! [`RequestHead`] they all share: `Content-Type`, `Accept`, `Mcp-Session-Id` and
//! `MCP-Protocol-Version`.
//!
//! Issue 23: every check looked these headers up again by `&str` name (each such lookup parses
//! and lower-cases the name before hashing it), and the `Accept` line was split and compared
//! three times per POST, about 10,000 instructions of a call's 68,000. Read here once, with
//! ready [`HeaderName`]s, and the `Accept` list in a single pass.

use http::{HeaderMap, HeaderName, header};

use super::{PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::protocol::{ProtocolVersion, STATELESS_VERSIONS};

/// `Mcp-Session-Id`, ready to look up (a lookup by `&str` parses the name every time).
pub(super) static SESSION: HeaderName = HeaderName::from_static(SESSION_HEADER);
/// `MCP-Protocol-Version`, ready to look up.
pub(super) static PROTOCOL_VERSION: HeaderName = HeaderName::from_static(PROTOCOL_VERSION_HEADER);

/// What a request's version header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    /// No version header.
    Absent,
    /// A value that is not visible ASCII text (`HeaderValue::to_str` fails), or the header
    /// repeated.
    Unreadable,
    /// A session-era version we speak.
    Session(ProtocolVersion),
    /// A version of the stateless era (2026-07-28), by its name.
    Stateless(&'static str),
    /// Readable, but no version of either era.
    Unknown,
}

impl Version {
    /// The reading of the version header's value(s): `None` when absent, `Some(None)` when
    /// repeated (as [`only`] says).
    fn of(v: Option<Option<&http::HeaderValue>>) -> Self {
        let Some(v) = v else {
            return Self::Absent;
        };
        // Repeated, it names no one version (and may name two eras): unreadable.
        let Some(v) = v.and_then(|v| v.to_str().ok()) else {
            return Self::Unreadable;
        };
        let v = v.trim();
        if let Some(version) = ProtocolVersion::parse(v) {
            return Self::Session(version);
        }
        match STATELESS_VERSIONS.iter().find(|s| **s == v) {
            Some(s) => Self::Stateless(s),
            None => Self::Unknown,
        }
    }

    /// Whether it names a version of the stateless era, or any readable non-session one.
    pub fn names_non_session(self) -> bool {
        matches!(self, Self::Stateless(_) | Self::Unknown)
    }

    /// Whether it names a version of the stateless era (2026-07-28), as opposed to a
    /// session-era one or one of no era at all.
    pub fn names_stateless_era(self) -> bool {
        matches!(self, Self::Stateless(_))
    }

    /// Whether a session-era request may carry it: absent, or a version we speak.
    pub fn fits_session_era(self) -> bool {
        matches!(self, Self::Absent | Self::Session(_))
    }
}

/// Which answer types a request's `Accept` list takes (an absent list takes anything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Accept {
    /// `application/json` (or a wildcard covering it).
    pub json: bool,
    /// `text/event-stream` (or a wildcard covering it).
    pub sse: bool,
}

/// The headers the edge checks judge a request by, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RequestHead {
    /// `Content-Type` is `application/json` (any case, any parameters).
    pub json_body: bool,
    /// The `Accept` list, `None` when no readable line is present.
    pub accept: Option<Accept>,
    /// An `Mcp-Session-Id` is present.
    pub session: bool,
    /// The version header.
    pub version: Version,
}

impl RequestHead {
    /// Reads the head of a request from its headers, in one pass over them: four lookups by
    /// name hashed each name and walked the map's chains (issue 40: about 680 instructions a
    /// POST, for the half-dozen headers a client sends). Read as the lookups read them: the
    /// first `Content-Type`, every `Accept` line in order, whether an `Mcp-Session-Id` is
    /// there, and the version header unless repeated ([`only`]).
    pub fn read(h: &HeaderMap) -> Self {
        let mut ct = None;
        let mut lines = AcceptLines::default();
        let mut session = false;
        let mut version = None;
        for (name, value) in h {
            if name == header::CONTENT_TYPE {
                ct = ct.or(Some(value));
            } else if name == header::ACCEPT {
                lines.add(value);
            } else if name == SESSION {
                session = true;
            } else if name == PROTOCOL_VERSION {
                // A second value makes it unreadable, as `only` says.
                version = Some(version.is_none().then_some(value));
            }
        }
        let ct = ct.and_then(|v| v.to_str().ok()).unwrap_or("");
        RequestHead {
            json_body: media_type(ct).eq_ignore_ascii_case(JSON),
            accept: lines.takes,
            session,
            version: Version::of(version),
        }
    }

    /// Whether the client takes an SSE answer (an absent `Accept` takes anything).
    pub fn takes_sse(&self) -> bool {
        self.accept.is_none_or(|a| a.sse)
    }
}

/// The session a request names in `Mcp-Session-Id`: `None` when the header is absent,
/// `Some(None)` when it cannot name one session (repeated, where which value counts is
/// ambiguous, or not visible ASCII). Such a request is answered as one whose id does not open
/// (`404 invalid session id`), which is also what the reference answers, as it joins repeated
/// values into one.
pub(super) fn session_id(h: &HeaderMap) -> Option<Option<&str>> {
    only(h, &SESSION).map(|v| v.and_then(|v| v.to_str().ok()))
}

/// A header that names one thing: `None` when absent, `Some(None)` when repeated (which copy
/// counts could differ between this instance, a proxy in front and a relayed request's
/// holder, so no copy is read), `Some(Some(value))` otherwise.
pub(super) fn only<K: http::header::AsHeaderName>(
    h: &HeaderMap,
    name: K,
) -> Option<Option<&http::HeaderValue>> {
    let mut values = h.get_all(name).iter();
    let first = values.next()?;
    Some(values.next().is_none().then_some(first))
}

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

/// Every readable `Accept` line as one list (RFC 9110 allows the list to be split over lines),
/// judged as the lines come for both answer types; `takes` is `None` while no line was
/// readable.
#[derive(Default)]
struct AcceptLines {
    takes: Option<Accept>,
}

impl AcceptLines {
    fn add(&mut self, value: &http::HeaderValue) {
        let Ok(line) = value.to_str() else {
            return;
        };
        let takes = self.takes.get_or_insert(Accept {
            json: false,
            sse: false,
        });
        let mut rest = Some(line);
        while let Some(list) = rest {
            let (part, next) = split_at(list, b',');
            rest = next;
            let m = media_type(part);
            // The two types by name first (what clients send), wildcards only past them.
            if m.eq_ignore_ascii_case(JSON) {
                takes.json = true;
            } else if m.eq_ignore_ascii_case(SSE) {
                takes.sse = true;
            } else {
                takes.json |= covers(m, JSON);
                takes.sse |= covers(m, SSE);
            }
        }
    }
}

/// `s` up to the first `sep` (an ASCII byte), and what follows it if there is one, found byte
/// by byte: these values are a few dozen bytes, shorter than the set-up of `str::split`'s
/// vectorised search, which cost 730 instructions a POST (issue 40).
fn split_at(s: &str, sep: u8) -> (&str, Option<&str>) {
    match s.bytes().position(|b| b == sep) {
        // `sep` is ASCII: both sides are on character boundaries.
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// A media range or type without its parameters. A readable header value is visible ASCII,
/// spaces and tabs (`HeaderValue::to_str`), so ASCII trimming is all the trimming there is.
fn media_type(value: &str) -> &str {
    split_at(value, b';').0.trim_ascii()
}

/// Whether the media range `range` (no parameters) covers the media type `mime`. Media types
/// are case-insensitive (RFC 9110 8.3.1), wildcards included.
pub(super) fn covers(range: &str, mime: &str) -> bool {
    let type_prefix = range.strip_suffix('*').filter(|p| p.ends_with('/'));
    range.eq_ignore_ascii_case(mime)
        || range == "*/*"
        || type_prefix.is_some_and(|p| {
            mime.get(..p.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(p))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                *name,
                HeaderValue::from_bytes(value).expect("valid header bytes"),
            );
        }
        h
    }

    fn head(pairs: &[(&'static str, &'static [u8])]) -> RequestHead {
        RequestHead::read(&headers(pairs))
    }

    /// The `Accept` list split over lines reads as the lines joined; an unreadable line is
    /// skipped, and a list of only unreadable lines is no list (lenient).
    #[test]
    fn accept_lines_are_one_list() {
        let split = head(&[("accept", b"text/html"), ("accept", b"TEXT/*;q=0.2")]);
        assert_eq!(
            split.accept,
            Some(Accept {
                json: false,
                sse: true
            })
        );
        let unreadable = head(&[("accept", b"\xffjson")]);
        assert_eq!(unreadable.accept, None);
        assert!(unreadable.takes_sse());
        let json_only = head(&[("accept", b"\xff"), ("accept", b"application/json")]);
        assert!(!json_only.takes_sse());
    }

    /// The version header's readings: the session era's, the stateless era's, unknown,
    /// unreadable (which names no era: a session-era request then fails its version check).
    #[test]
    fn version_header_readings() {
        assert_eq!(head(&[]).version, Version::Absent);
        assert_eq!(
            head(&[("mcp-protocol-version", b" 2025-06-18 ")]).version,
            Version::Session(ProtocolVersion::V2025_06_18)
        );
        assert_eq!(
            head(&[("mcp-protocol-version", b"2026-07-28")]).version,
            Version::Stateless("2026-07-28")
        );
        let unknown = head(&[("mcp-protocol-version", b"1999-01-01")]).version;
        assert!(unknown.names_non_session() && !unknown.names_stateless_era());
        let unreadable = head(&[("mcp-protocol-version", b"\xff")]).version;
        assert!(!unreadable.names_non_session() && !unreadable.fits_session_era());
        for twice in [
            [b"2025-11-25".as_slice(), b"2026-07-28"],
            [b"2025-11-25", b"2025-11-25"],
        ] {
            let pairs = [
                ("mcp-protocol-version", twice[0]),
                ("mcp-protocol-version", twice[1]),
            ];
            assert_eq!(
                RequestHead::read(&headers(&pairs)).version,
                Version::Unreadable
            );
        }
        assert!(head(&[("Mcp-Session-Id", b"s")]).session);
    }

    /// One readable `Mcp-Session-Id` names a session; a repeated or unreadable one names none.
    #[test]
    fn session_id_readings() {
        let read = |pairs: &[(&'static str, &[u8])]| {
            let h = headers(pairs);
            session_id(&h).map(|id| id.map(str::to_owned))
        };
        assert_eq!(read(&[]), None);
        assert_eq!(
            read(&[("mcp-session-id", b"abc")]),
            Some(Some("abc".into()))
        );
        assert_eq!(
            read(&[("mcp-session-id", b"a"), ("mcp-session-id", b"a")]),
            Some(None)
        );
        assert_eq!(
            read(&[("mcp-session-id", b"a"), ("mcp-session-id", b"b")]),
            Some(None)
        );
        assert_eq!(read(&[("mcp-session-id", b"\xffa")]), Some(None));
    }

    /// The head as one lookup per header read it (the reading before issue 40's single pass).
    fn by_lookups(h: &HeaderMap) -> RequestHead {
        let ct = h
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let mut lines = AcceptLines::default();
        for v in h.get_all(header::ACCEPT) {
            lines.add(v);
        }
        RequestHead {
            json_body: media_type(ct).eq_ignore_ascii_case(JSON),
            accept: lines.takes,
            session: h.contains_key(&SESSION),
            version: Version::of(only(h, &PROTOCOL_VERSION)),
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::testing::prop_config(500))]

        /// The single pass reads any headers, in any order and repeated or not, as the lookups
        /// by name did.
        #[test]
        fn one_pass_reads_as_the_lookups_did(
            pairs in prop::collection::vec((
                prop::sample::select(vec![
                    "content-type", "accept", "mcp-session-id", "mcp-protocol-version", "host",
                    "x-other",
                ]),
                prop::sample::select(vec![
                    &b"application/json"[..], b"text/event-stream", b"application/json, text/*",
                    b"2025-06-18", b"2026-07-28", b"s-1", b"\xff", b"",
                ]),
            ), 0..8),
        ) {
            let h = headers(&pairs);
            prop_assert_eq!(RequestHead::read(&h), by_lookups(&h));
        }
    }
}
