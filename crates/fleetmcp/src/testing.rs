//! Helpers for the crate's own unit tests.

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
