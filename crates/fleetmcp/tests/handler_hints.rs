//! What the compiler says of a handler of the wrong shape (issue 41): a function given to
//! `ToolBuilder::handler_fn` that does not take (arguments, `RequestContext`[, `State<T>`]) is
//! refused with the note of `HandlerFn`'s `#[diagnostic::on_unimplemented]`, which names
//! what a handler takes and `State`; the expected output is `tests/compile_fail/*.stderr`
//! (regenerate with `TRYBUILD=overwrite` after a deliberate change of the note, and read it).
//!
//! The closure methods (`.handler` and the others) take an `Fn(..)` bound so that a closure's
//! arguments need no types, and there rustc reports a wrong count as E0593 before any trait
//! of ours is asked: `catalog/handler.rs` says why.

#[test]
fn a_handler_of_the_wrong_shape_is_told_what_a_handler_takes() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}
