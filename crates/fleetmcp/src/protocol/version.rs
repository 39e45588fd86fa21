//! Protocol revisions this server speaks, and the negotiation rule of `initialize`.

use std::fmt;

/// A protocol revision. Ordered by date, so `v >= ProtocolVersion::V2025_11_25` reads naturally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    V2024_11_05,
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
}

/// The stateless revision: no `initialize`, no session; every request carries its metadata.
pub const STATELESS_VERSION: &str = "2026-07-28";

/// Versions served statelessly (`server/discover`'s `supportedVersions`).
pub const STATELESS_VERSIONS: [&str; 1] = [STATELESS_VERSION];

impl ProtocolVersion {
    /// Every revision with an `initialize` handshake, oldest first.
    pub const SESSION_ERA: [ProtocolVersion; 4] = [
        Self::V2024_11_05,
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
    ];
    pub const LATEST: ProtocolVersion = Self::V2025_11_25;

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "2024-11-05" => Self::V2024_11_05,
            "2025-03-26" => Self::V2025_03_26,
            "2025-06-18" => Self::V2025_06_18,
            "2025-11-25" => Self::V2025_11_25,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
        }
    }

    /// The answer to a client that asked for `requested`: the same revision when we speak it,
    /// otherwise our latest (the client then decides whether it can continue).
    pub fn negotiate(requested: &str) -> Self {
        Self::parse(requested).unwrap_or(Self::LATEST)
    }

    /// JSON-RPC batches exist only in 2025-03-26.
    pub fn allows_batches(self) -> bool {
        self == Self::V2025_03_26
    }

    /// SSE priming events (an id and an empty `data`) break older clients' parsers.
    pub fn wants_priming(self) -> bool {
        self >= Self::V2025_11_25
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_and_falls_back_to_latest() {
        assert_eq!(
            ProtocolVersion::negotiate("2025-06-18"),
            ProtocolVersion::V2025_06_18
        );
        assert_eq!(
            ProtocolVersion::negotiate("2025-03-26"),
            ProtocolVersion::V2025_03_26
        );
        assert_eq!(
            ProtocolVersion::negotiate("1999-01-01"),
            ProtocolVersion::LATEST
        );
        assert!(ProtocolVersion::V2025_03_26.allows_batches());
        assert!(!ProtocolVersion::V2025_06_18.allows_batches());
    }
}
