//! `fleet-loadgen rtt`: round trips one after another on one connection, so that
//! `bench/scale.sh` can show what a delaying relay (`delay.rs`) or `tc netem` adds to a hop: the
//! same probe sent directly and through it.
//!
//! ```text
//! fleet-loadgen rtt --redis HOST:PORT [--count 200]   # PING, +PONG
//! fleet-loadgen rtt --url http://HOST:PORT/healthz [--count 200]
//! ```
//!
//! Prints one JSON line: `count, min_us, p50_us, p90_us` (the first exchange, which connects,
//! is left out).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A probe may not take longer than this (a stuck hop is an error, not a hang).
const TIMEOUT: Duration = Duration::from_secs(10);

/// One Redis PING answered on `s`.
async fn ping(s: &mut TcpStream) -> Result<(), String> {
    s.write_all(b"PING\r\n").await.map_err(|e| e.to_string())?;
    let mut got = [0u8; 7];
    s.read_exact(&mut got).await.map_err(|e| e.to_string())?;
    if &got != b"+PONG\r\n" {
        return Err(format!("PING answered {:?}", String::from_utf8_lossy(&got)));
    }
    Ok(())
}

async fn probe(
    redis: Option<String>,
    url: Option<String>,
    count: usize,
) -> Result<Histogram<u64>, String> {
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    let mut record = |t: Instant| {
        hist.record(t.elapsed().as_micros().max(1) as u64)
            .map_err(|e| e.to_string())
    };
    if let Some(addr) = redis {
        let mut s = TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        ping(&mut s).await?;
        for _ in 0..count {
            let t = Instant::now();
            ping(&mut s).await?;
            record(t)?;
        }
    } else if let Some(url) = url {
        // One keep-alive connection (a pool of one, used in turn).
        let c = reqwest::Client::builder()
            .http1_only()
            .tcp_nodelay(true)
            .no_proxy()
            .build()
            .map_err(|e| e.to_string())?;
        for i in 0..=count {
            let t = Instant::now();
            let resp = c
                .get(&url)
                .send()
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let status = resp.status();
            resp.bytes().await.map_err(|e| format!("{url}: {e}"))?;
            if !status.is_success() {
                return Err(format!("{url}: HTTP {status}"));
            }
            if i > 0 {
                record(t)?;
            }
        }
    } else {
        return Err("usage: fleet-loadgen rtt --redis HOST:PORT | --url URL [--count N]".into());
    }
    Ok(hist)
}

/// `fleet-loadgen rtt ...`.
pub async fn main(args: Vec<String>) -> std::process::ExitCode {
    let (mut redis, mut url, mut count) = (None, None, 200usize);
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let Some(val) = it.next() else {
            eprintln!("fleet-loadgen rtt: {flag} needs a value");
            return std::process::ExitCode::from(2);
        };
        match flag.as_str() {
            "--redis" => redis = Some(val),
            "--url" => url = Some(val),
            "--count" => count = val.parse().unwrap_or(0).clamp(1, 100_000),
            _ => {
                eprintln!("fleet-loadgen rtt: unknown flag {flag}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    match tokio::time::timeout(TIMEOUT, probe(redis, url, count)).await {
        Ok(Ok(h)) => {
            println!(
                "{}",
                json!({"count": h.len(), "min_us": h.min(), "p50_us": h.value_at_quantile(0.5),
                    "p90_us": h.value_at_quantile(0.9)})
            );
            std::process::ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("fleet-loadgen rtt: {e}");
            std::process::ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("fleet-loadgen rtt: no answer within {TIMEOUT:?}");
            std::process::ExitCode::FAILURE
        }
    }
}
