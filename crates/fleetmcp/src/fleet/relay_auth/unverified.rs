//! Why the holder refuses a relayed request: what `verify.rs` and `nonces.rs` both answer
//! with, in a file of its own so that neither imports the other for it.

/// Why a relayed request was not verified (and is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::fleet) enum Unverified {
    /// Some relay headers but not all that are needed.
    Incomplete,
    /// The relay header does not parse.
    Malformed,
    /// The MAC does not verify under any key.
    BadMac,
    /// Its timestamp is outside the replay window.
    Stale,
    /// Its nonce was seen within the window.
    Replayed,
    /// Too many nonces to remember: refused rather than risk accepting a replay.
    Overloaded,
    /// The sealed credentials do not open (only a signer with the key could make this).
    BadSeal,
    /// Stamped before this process started: a hop recorded before a restart, replayed.
    BeforeStart,
}

impl Unverified {
    /// For the log and the error message.
    pub fn why(self) -> &'static str {
        match self {
            Self::Incomplete => "relay headers are missing",
            Self::Malformed => "its relay authentication header does not parse",
            Self::BadMac => "its MAC does not verify under this fleet's secrets",
            Self::Stale => "its timestamp is outside the replay window",
            Self::Replayed => "its nonce was already used (a replay)",
            Self::Overloaded => "too many relayed requests to remember their nonces",
            Self::BadSeal => "its sealed credentials do not open",
            Self::BeforeStart => {
                "it was signed before this instance started (a replay, or a request that crossed a restart: retry)"
            }
        }
    }
}
