//! Log levels of `notifications/message` (RFC 5424, as MCP names them): set per session with
//! `logging/setLevel`, or per request in 2026-07-28's `_meta`.

/// RFC 5424 levels, as MCP names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum LogLevel {
    /// Detailed information for debugging.
    Debug = 0,
    /// What happens in the normal course of things.
    Info,
    /// Normal but significant.
    Notice,
    /// Something may need attention.
    Warning,
    /// Something failed.
    Error,
    /// A critical condition.
    Critical,
    /// Action must be taken at once.
    Alert,
    /// The system is unusable.
    Emergency,
}

impl LogLevel {
    /// The level MCP names `s` (`"debug"` .. `"emergency"`); `None` for any other word.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "debug" => Self::Debug,
            "info" => Self::Info,
            "notice" => Self::Notice,
            "warning" => Self::Warning,
            "error" => Self::Error,
            "critical" => Self::Critical,
            "alert" => Self::Alert,
            "emergency" => Self::Emergency,
            _ => return None,
        })
    }
    /// The level's name in MCP messages (`"warning"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }
    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Debug,
            1 => Self::Info,
            2 => Self::Notice,
            3 => Self::Warning,
            4 => Self::Error,
            5 => Self::Critical,
            6 => Self::Alert,
            _ => Self::Emergency,
        }
    }
}
