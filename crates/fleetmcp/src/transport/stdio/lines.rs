//! The input side of a stdio connection: the process's stdin as a byte stream, cut into lines
//! of bounded length.

use std::io::{self, Read};

use bytes::Bytes;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

/// One read from the input.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// A line, without its newline (nor a `\r` before it).
    Message(Vec<u8>),
    /// A line longer than the bound; its bytes were skipped.
    TooLong,
    /// The input ended.
    Eof,
}

/// Reads the next line of `input`, keeping at most `max` bytes of it: a longer line is skipped
/// to its end (never held whole) and reported as [`Line::TooLong`]. A last line without its
/// newline still counts. Not cancel-safe: a call dropped halfway loses the line it was reading,
/// which only happens when the connection stops.
pub(super) async fn next_line<R>(input: &mut R, max: usize) -> io::Result<Line>
where
    R: AsyncBufRead + Unpin,
{
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::Eof,
                (false, false) => Line::Message(trim_cr(line)),
            });
        }
        let end = memchr::memchr(b'\n', buf);
        let chunk = &buf[..end.unwrap_or(buf.len())];
        if !too_long && line.len() + chunk.len() > max {
            too_long = true;
            line = Vec::new();
        }
        if !too_long {
            line.extend_from_slice(chunk);
        }
        let used = end.map_or(buf.len(), |i| i + 1);
        input.consume(used);
        if end.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Message(trim_cr(line))
            });
        }
    }
}

fn trim_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

/// The process's stdin, read by a thread of its own. Not `tokio::io::stdin`: its reads run on
/// the runtime's blocking pool and cannot be cancelled, so a server stopped by a signal while
/// its stdin is open (a terminal) would hang on exit until a line came. A plain thread blocked
/// in `read` does not keep the process from exiting.
pub(crate) fn process_stdin() -> impl AsyncRead + Unpin + Send + 'static {
    // A few chunks ahead of the reader at most: the thread waits when the server does.
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    let spawned = std::thread::Builder::new()
        .name("fleetmcp-stdin".into())
        .spawn(move || {
            let mut stdin = io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let chunk = match stdin.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => Ok(Bytes::copy_from_slice(&buf[..n])),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = chunk.is_err();
                if tx.blocking_send(chunk).is_err() || failed {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        // No thread, no input: the connection sees an error at once and ends.
        tracing::error!(error = %e, "stdio: could not start the thread that reads stdin");
    }
    StreamReader::new(ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        // A one-byte buffer makes every line cross many reads.
        let mut r = tokio::io::BufReader::with_capacity(1, input);
        let mut out = Vec::new();
        loop {
            let l = next_line(&mut r, max).await.unwrap();
            let end = l == Line::Eof;
            out.push(l);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn lines_are_cut_bounded_and_the_last_one_may_lack_its_newline() {
        let m = |s: &str| Line::Message(s.as_bytes().to_vec());
        assert_eq!(
            lines(b"ab\r\n\nabcdef\nxyz", 4).await,
            [m("ab"), m(""), Line::TooLong, m("xyz"), Line::Eof]
        );
        assert_eq!(lines(b"abcdef", 4).await, [Line::TooLong, Line::Eof]);
        assert_eq!(lines(b"abcd\n", 4).await, [m("abcd"), Line::Eof]);
        assert_eq!(lines(b"", 4).await, [Line::Eof]);
    }
}
