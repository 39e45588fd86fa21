//! What is request-local: what the layers serving one HTTP request learn about it (its MCP
//! method and era, known only once the body is parsed, deep inside transport) and its trace
//! context, kept in a task-local so no signature carries them and no label is allocated per
//! request. The request's outer layer runs the request in it ([`RequestLocal::run`]) and reads
//! the labels when the answer's head is ready; code running outside a request (a spawned task,
//! a unit test) notes nothing and reads nothing.

use std::cell::Cell;
use std::future::Future;

use futures_util::FutureExt;

use super::trace_context::TraceContext;

/// The MCP methods labelled by name; anything else is [`Method::OTHER`]. A fixed list keeps
/// the metric's cardinality bounded whatever clients send.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    "tasks/update",
    "server/discover",
    "subscriptions/listen",
    // Not methods (a client's method of the same name is `other`): what a request was when it had no single method.
    "notification",
    "response",
    "batch",
    "stream",
    "delete",
    "relayed",
    "other",
    "unparsed",
];

/// How many of [`METHODS`] are MCP method names.
const MCP_METHODS: usize = 20;

/// A method label: an index into a fixed list of names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Method(u8);

impl Method {
    /// A notification (no answer but `202`).
    pub const NOTIFICATION: Method = Method::fixed("notification");
    /// A client's response to a request of the server.
    pub const RESPONSE: Method = Method::fixed("response");
    /// A JSON-RPC batch (2025-03-26).
    pub const BATCH: Method = Method::fixed("batch");
    /// A GET that opens a stream (`/mcp`, `/sse`).
    pub const STREAM: Method = Method::fixed("stream");
    /// `DELETE /mcp`.
    pub const DELETE: Method = Method::fixed("delete");
    /// Handed to the instance that holds the session (counted there by its own method).
    pub const RELAYED: Method = Method::fixed("relayed");
    /// A method not in the list.
    pub const OTHER: Method = Method::fixed("other");
    /// Answered before its body was parsed (a refused header, a body too large, bad JSON).
    pub const UNPARSED: Method = Method::fixed("unparsed");

    /// The label of an MCP method name.
    pub fn of(name: &str) -> Method {
        METHODS[..MCP_METHODS]
            .iter()
            .position(|m| *m == name)
            .map_or(Method::OTHER, |i| Method(i as u8))
    }

    const fn fixed(name: &str) -> Method {
        let mut i = 0;
        while i < METHODS.len() {
            if eq(METHODS[i].as_bytes(), name.as_bytes()) {
                return Method(i as u8);
            }
            i += 1;
        }
        panic!("not a label in METHODS")
    }

    /// The label's value.
    pub fn as_str(self) -> &'static str {
        METHODS[self.0 as usize]
    }
}

const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A request's protocol era, as a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Era {
    /// `Mcp-Session-Id` (2025-03-26 to 2025-11-25, and `initialize`).
    Session,
    /// 2026-07-28.
    Stateless,
    /// 2024-11-05's `/sse` + `/message`.
    Legacy,
    /// Answered before its era was known.
    Unknown,
}

impl Era {
    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Session => "session",
            Era::Stateless => "stateless",
            Era::Legacy => "legacy",
            Era::Unknown => "unknown",
        }
    }
}

/// What is known of a request so far.
#[derive(Clone, Copy, Debug)]
pub struct Labels {
    pub method: Method,
    pub era: Era,
}

struct State {
    labels: Cell<Labels>,
    /// `None` when no span records the request (see `observe::request`).
    trace: Option<TraceContext>,
}

tokio::task_local! {
    static REQUEST: State;
}

/// One request's request-local state (its labels and trace context).
pub struct RequestLocal;

impl RequestLocal {
    /// Runs `serve` with request-local state that starts with `labels` and `trace` (`None`
    /// when no span records the request, so nothing was read or made for it); returns its
    /// output and the labels noted meanwhile.
    ///
    /// A plain function around `serve`, not an `async fn` awaiting it: an async function (or
    /// block) that takes a future and awaits it keeps room for it twice, as its argument and
    /// as what it awaits, and these wrappers nest (issue 23: the MCP layer's future, which
    /// axum copies into a box on every request, was 11 KiB).
    pub fn run<F: Future>(
        labels: Labels,
        trace: Option<TraceContext>,
        serve: F,
    ) -> impl Future<Output = (F::Output, Labels)> {
        let state = State {
            labels: Cell::new(labels),
            trace,
        };
        REQUEST.scope(
            state,
            serve.map(|out| {
                let labels = REQUEST.with(|s| s.labels.get());
                (out, labels)
            }),
        )
    }
}

/// Notes the request's MCP method (a batch keeps its `batch` label: its items are not the
/// request).
pub fn note_method(method: Method) {
    let _ = REQUEST.try_with(|s| {
        let mut l = s.labels.get();
        if l.method != Method::BATCH {
            l.method = method;
            s.labels.set(l);
        }
    });
}

/// Notes the request's era.
pub fn note_era(era: Era) {
    let _ = REQUEST.try_with(|s| {
        let mut l = s.labels.get();
        l.era = era;
        s.labels.set(l);
    });
}

/// The request's trace context, inside a request whose span is recorded.
pub fn trace() -> Option<TraceContext> {
    REQUEST.try_with(|s| s.trace).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_are_a_fixed_set() {
        assert_eq!(Method::of("tools/call").as_str(), "tools/call");
        assert_eq!(Method::of("x/unknown").as_str(), "other");
        // Labels that are not MCP methods cannot be claimed by a client's method name.
        assert_eq!(Method::of("unparsed").as_str(), "other");
        assert_eq!(Method::of("relayed").as_str(), "other");
        assert_eq!(
            Method::of("subscriptions/listen").as_str(),
            "subscriptions/listen"
        );
        assert_eq!(Method::RELAYED.as_str(), "relayed");
    }

    #[tokio::test]
    async fn notes_reach_the_request_and_a_batch_keeps_its_label() {
        let start = Labels {
            method: Method::UNPARSED,
            era: Era::Unknown,
        };
        let trace = TraceContext::new_trace();
        let ((), l) = RequestLocal::run(start, Some(trace), async {
            note_era(Era::Session);
            note_method(Method::of("tools/call"));
            assert_eq!(super::trace(), Some(trace));
        })
        .await;
        assert_eq!((l.method.as_str(), l.era), ("tools/call", Era::Session));
        let ((), l) = RequestLocal::run(start, None, async {
            note_method(Method::BATCH);
            note_method(Method::of("ping"));
            // A request no span records has no trace context.
            assert_eq!(super::trace(), None);
        })
        .await;
        assert_eq!(l.method, Method::BATCH);
        // Outside a request, nothing is noted and nothing fails.
        note_method(Method::of("ping"));
        assert_eq!(super::trace(), None);
    }
}
