//! An error with its causes as one line of text, for the log: what the relay and the
//! advertiser's self-check both write when an HTTP exchange fails (in a file of its own, so
//! that neither reaches into the other for it).

/// An error and its causes, for the log (the client's own message names only its kind).
pub(super) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
