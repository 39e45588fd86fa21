//! The one raw HTTP/1.1 client of the test suites, over a blocking `std::net::TcpStream`: for
//! requests a regular client cannot express (no `Accept`, a foreign `Host`, a header field
//! sent twice, a header's spelling on the wire), for streams kept open by hand, and for the
//! example packages' tests, which have no HTTP client dependency.
//!
//! `tests/support` wraps it for async tests; the example packages include it through
//! `examples/e2e_support.rs`. It needs only std and `serde_json`.
//!
//! A request carries exactly the headers it is given, plus `Content-Length` when it has a body
//! and `Connection: close` when the whole answer is read: a caller that wants a `Host` sends one.

#![allow(dead_code)] // each test crate uses a different part of this file

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One HTTP answer, its body de-chunked.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// From connecting until the answer was complete.
    pub elapsed: Duration,
}

impl RawResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message of the body: the body itself, or the last `data:` of an SSE
    /// stream that carries a JSON-RPC answer.
    pub fn json(&self) -> Value {
        let sse = self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if sse {
            self.body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .rfind(|v| v.get("result").is_some() || v.get("error").is_some())
                .unwrap_or_else(|| {
                    panic!("no JSON-RPC answer in the SSE body:\n{}", self.describe())
                })
        } else {
            serde_json::from_str(&self.body)
                .unwrap_or_else(|e| panic!("body is not JSON ({e}):\n{}", self.describe()))
        }
    }

    /// Status, time, headers and body, for failure messages.
    pub fn describe(&self) -> String {
        let headers: String = self
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        format!(
            "HTTP {} after {:.0?}\n{headers}\n{}",
            self.status, self.elapsed, self.body
        )
    }
}

fn request_text(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    close: bool,
) -> String {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    if close {
        req.push_str("Connection: close\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    req
}

fn connect(addr: SocketAddr, limit: Duration) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, limit)?;
    stream.set_write_timeout(Some(limit))?;
    stream.set_read_timeout(Some(limit))?;
    Ok(stream)
}

/// Connects and sends one request without `Connection: close`, leaving the answer (an SSE
/// stream, say) to the caller; reads and writes on the socket time out after `limit`.
pub fn open(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    limit: Duration,
) -> io::Result<TcpStream> {
    let mut stream = connect(addr, limit)?;
    stream.write_all(request_text(method, path, headers, body, false).as_bytes())?;
    Ok(stream)
}

/// Reads an answer's status line from `stream` (its headers and body may still be streaming).
pub fn read_status(stream: &mut TcpStream) -> io::Result<u16> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "connection closed before the status line",
            ));
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(ErrorKind::InvalidData, format!("bad status line {line:?}")))
}

/// Sends one request on a fresh connection (`Connection: close`) and reads the whole answer;
/// an error if anything fails or the answer is not complete within `limit`.
pub fn try_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    limit: Duration,
) -> io::Result<RawResponse> {
    let start = Instant::now();
    let mut stream = connect(addr, limit)?;
    stream.write_all(request_text(method, path, headers, body, true).as_bytes())?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(io::Error::new(
                ErrorKind::TimedOut,
                format!(
                    "no complete answer within {limit:?} (a hang); got so far:\n{}",
                    String::from_utf8_lossy(&raw)
                ),
            ));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    parse_response(&raw, start.elapsed()).ok_or_else(|| {
        io::Error::new(
            ErrorKind::InvalidData,
            format!("not an HTTP answer:\n{}", String::from_utf8_lossy(&raw)),
        )
    })
}

/// [`try_send`], failing the test (naming the request) on any error.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    limit: Duration,
) -> RawResponse {
    try_send(addr, method, path, headers, body, limit)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

fn parse_response(raw: &[u8], elapsed: Duration) -> Option<RawResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body)?;
    }
    Some(RawResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        elapsed,
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n")?;
        let size_line = std::str::from_utf8(&data[..eol]).ok()?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        data = &data[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}
