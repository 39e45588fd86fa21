//! Time as the wire formats want it (Unix milliseconds and seconds for records other instances
//! read, ISO 8601 for task timestamps), and the coarse monotonic clock a call reads.
//!
//! Durations inside one process use `Instant`, or [`coarse_ms`] where milliseconds are enough
//! and every call reads the clock; the rest are only for values that leave the process.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds on the system's monotonic clock as of its last tick (`CLOCK_MONOTONIC_COARSE`,
/// 1 to 4 ms behind the precise clock): a read of the kernel's shared page, where `Instant`
/// reads the time stamp counter and scales it, about 25 ns on a virtual machine. For times a
/// call notes (a session's last use, its record's last refresh) that bounds of seconds are
/// checked against (issue 40).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) fn coarse_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration; the clock id is one
    // this system has, so the call cannot fail (and `t` stays zero if it did).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// [`coarse_ms`] where the system has no coarse clock: milliseconds since the first read.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
pub(crate) fn coarse_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

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

    /// The coarse clock moves, with the precise one, never back: what it moved between two reads
    /// lies within what the precise clock saw around them, give or take a tick (1 to 10 ms).
    #[test]
    fn the_coarse_clock_keeps_up_with_the_precise_one() {
        use std::time::{Duration, Instant};
        let read = || {
            let before = Instant::now();
            let coarse = coarse_ms();
            (before, coarse, Instant::now())
        };
        let (b0, c0, a0) = read();
        std::thread::sleep(Duration::from_millis(50));
        let (b1, c1, a1) = read();
        assert!(c1 >= c0, "never back");
        let moved = c1 - c0;
        let (least, most) = (
            b1.duration_since(a0).as_millis() as u64,
            a1.duration_since(b0).as_millis() as u64,
        );
        assert!(
            moved + 11 >= least && moved <= most + 11,
            "moved {moved} ms while the precise clock moved {least} to {most} ms"
        );
    }
}
