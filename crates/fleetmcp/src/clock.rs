//! Wall-clock time as the wire formats want it: Unix milliseconds and seconds for records
//! other instances read, ISO 8601 for task timestamps.
//!
//! Durations inside one process use `Instant`; these are only for values that leave it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_secs() -> u64 {
    unix_ms() / 1000
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn iso_now() -> String {
    let ms = unix_ms();
    iso8601(ms / 1000, (ms % 1000) as u32)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` from Unix seconds (civil-from-days, proleptic Gregorian).
fn iso8601(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_798_502_400, 5), "2026-12-29T00:00:00.005Z");
        assert_eq!(iso8601(951_782_400, 0), "2000-02-29T00:00:00.000Z");
        assert!(iso_now().starts_with("20"));
        assert!(unix_secs() > 1_700_000_000);
    }
}
