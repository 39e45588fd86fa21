//! W3C Trace Context (`traceparent`, <https://www.w3.org/TR/trace-context/>): a client's
//! header (or, without a valid one, the `traceparent` of its request's `_meta`, SEP-414) is
//! kept when valid, else a new trace starts here. Each hop (this instance, then the
//! relay to a session's holder) is a new span of the same trace.

use std::fmt;

/// The header's name.
pub const TRACEPARENT: &str = "traceparent";

/// One hop's trace context: the trace it belongs to, its own span id, and the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// 16 bytes, never all zero.
    pub trace_id: u128,
    /// This hop's span id (8 bytes, never zero): the parent id of the next hop.
    pub span_id: u64,
    /// The span id of the caller's hop (the client's, or the relaying instance's) from a valid
    /// `traceparent`; `None` when the trace starts here. An exported span names it as its
    /// parent, so the hops show as one tree.
    pub parent_id: Option<u64>,
    /// `01`: sampled.
    pub flags: u8,
}

impl TraceContext {
    /// A new trace (the client sent no valid `traceparent`), sampled.
    pub fn new_trace() -> Self {
        Self {
            trace_id: nonzero(rand::random::<u128>),
            span_id: new_span_id(),
            parent_id: None,
            flags: 1,
        }
    }

    /// The context of this hop: the client's trace when `header` is a valid `traceparent`,
    /// else a new one. Never fails: a bad header only starts a new trace (the specification's
    /// rule), so it costs the client nothing.
    #[cfg(test)]
    pub fn from_header(header: Option<&[u8]>) -> Self {
        header
            .and_then(Self::from_traceparent)
            .unwrap_or_else(Self::new_trace)
    }

    /// The context of this hop in the caller's trace, if `value` is a valid `traceparent`
    /// (the header's, or the `traceparent` key of a request's `_meta`: SEP-414).
    pub fn from_traceparent(value: &[u8]) -> Option<Self> {
        let (trace_id, parent, flags) = parse(value)?;
        Some(Self {
            trace_id,
            span_id: new_span_id(),
            parent_id: Some(parent),
            flags,
        })
    }

    /// The `traceparent` to send to the next hop (this hop as its parent).
    pub fn header_value(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.span_id, self.flags
        )
    }

    /// The trace id as 32 lower-case hex digits, for log fields.
    pub fn trace_id(&self) -> TraceId {
        TraceId(self.trace_id)
    }
}

/// A trace id that formats as 32 lower-case hex digits (formatted only when a log line is).
#[derive(Clone, Copy, Debug)]
pub struct TraceId(pub u128);

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// From the thread's generator: no system call per request.
fn new_span_id() -> u64 {
    nonzero(rand::random::<u64>)
}

/// A random value that is not zero (zero ids are invalid in the specification).
fn nonzero<T: PartialEq + Default>(mut draw: impl FnMut() -> T) -> T {
    loop {
        let v = draw();
        if v != T::default() {
            return v;
        }
    }
}

/// `version-traceid-parentid-flags`: `00` exactly 55 characters; a later version at least
/// that, its next character a `-` (forward compatibility); `ff` never. Lower-case hex only;
/// an all-zero trace or parent id is invalid.
/// Returns the trace id, the parent (caller's span) id and the flags.
fn parse(h: &[u8]) -> Option<(u128, u64, u8)> {
    if h.len() < 55 || h[2] != b'-' || h[35] != b'-' || h[52] != b'-' {
        return None;
    }
    let version = hex(&h[0..2])? as u8;
    match version {
        0xff => return None,
        0 if h.len() != 55 => return None,
        _ if h.len() > 55 && h[55] != b'-' => return None,
        _ => {}
    }
    let trace_id = hex(&h[3..35])?;
    let parent = hex(&h[36..52])? as u64;
    let flags = hex(&h[53..55])? as u8;
    (trace_id != 0 && parent != 0).then_some((trace_id, parent, flags))
}

/// Lower-case hex digits (at most 32) as a number.
fn hex(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u128::from(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_header_keeps_its_trace_and_flags_with_a_new_span() {
        let t = TraceContext::from_header(Some(VALID.as_bytes()));
        assert_eq!(t.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.flags, 1);
        assert_eq!(t.parent_id, Some(0x00f0_67aa_0ba9_02b7));
        assert_ne!(t.span_id, 0x00f0_67aa_0ba9_02b7);
        let next = t.header_value();
        assert!(
            next.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{next}"
        );
        assert_eq!(
            TraceContext::from_header(Some(next.as_bytes())).trace_id,
            t.trace_id
        );
    }

    #[test]
    fn an_invalid_header_starts_a_new_trace() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for b in bad {
            let t = TraceContext::from_header(Some(b.as_bytes()));
            assert_ne!(
                t.trace_id().to_string(),
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "{b:?}"
            );
            assert_ne!(t.trace_id, 0);
            assert_eq!(t.parent_id, None, "{b:?}");
        }
        let a = TraceContext::from_header(None);
        let b = TraceContext::from_header(None);
        assert_ne!(a.trace_id, b.trace_id);
        assert_eq!(a.parent_id, None);
    }

    #[test]
    fn a_later_version_is_read_for_what_it_shares_with_version_00() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        let t = TraceContext::from_header(Some(later.as_bytes()));
        assert_eq!(t.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.flags, 0);
        assert_eq!(t.parent_id, Some(0x00f0_67aa_0ba9_02b7));
    }
}
