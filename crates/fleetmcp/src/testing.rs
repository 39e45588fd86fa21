//! Helpers for the crate's own unit tests.

use proptest::prelude::*;
use proptest::test_runner::Config;

/// A property test's configuration: `cases` cases, and no regression files written into the
/// repository (a real failure becomes a plain unit test next to the property).
pub(crate) fn prop_config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Values of an `MCP-Protocol-Version` header worth trying (`None`: no header): every version,
/// near misses (padded, a day off, a word, empty) and arbitrary bytes, obs-text included.
pub(crate) fn version_header() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        prop::sample::select(vec![
            "2024-11-05",
            "2025-03-26",
            "2025-06-18",
            "2025-11-25",
            "2026-07-28",
            " 2025-11-25 ",
            " 2025-03-26\t",
            "2025-11-26",
            "bogus",
            "",
        ])
        .prop_map(|v| Some(v.as_bytes().to_vec())),
        prop::collection::vec(prop_oneof![0x20u8..=0x7e, 0x80u8..=0xff], 0..14).prop_map(Some),
    ]
}

/// The size of what a function of two arguments returns: for a future, the bytes its caller
/// holds while it runs (the future-size tests of `dispatch` and `transport::http`).
pub(crate) fn ret2<A, B, R>(_: &impl Fn(A, B) -> R) -> usize {
    std::mem::size_of::<R>()
}

/// [`ret2`], for a function of three arguments.
pub(crate) fn ret3<A, B, C, R>(_: &impl Fn(A, B, C) -> R) -> usize {
    std::mem::size_of::<R>()
}
