//! A connection's socket whose writes are bounded in time (`http.write_timeout_ms`): a client
//! that stops reading is let go once its socket's buffers are full for that long.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// A TCP stream whose writes fail once one has been blocked for `limit`: the client stopped
/// reading and the socket buffers are full. Reads are untouched (hyper reads while it writes a
/// long answer, to notice a client that went away, so a read timeout would end quiet SSE
/// streams).
pub(super) struct WriteDeadline {
    io: TcpStream,
    peer: SocketAddr,
    limit: Duration,
    // Armed when a write first returns Pending, disarmed when one makes progress; the box is
    // kept and reset, not reallocated.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl WriteDeadline {
    pub(super) fn new(io: TcpStream, peer: SocketAddr, limit: Duration) -> Self {
        Self {
            io,
            peer,
            limit,
            timer: None,
            armed: false,
        }
    }

    fn bound<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.armed = false;
            return r;
        }
        if !self.armed {
            let deadline = Instant::now() + self.limit;
            match self.timer.as_mut() {
                Some(t) => t.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        let Some(timer) = self.timer.as_mut() else {
            return Poll::Pending; // armed above
        };
        if timer.as_mut().poll(cx).is_ready() {
            self.armed = false;
            tracing::info!(
                peer = %self.peer,
                "closing a connection whose client stopped reading for {} ms (http.write_timeout_ms)",
                self.limit.as_millis()
            );
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "write blocked past http.write_timeout_ms",
            )));
        }
        Poll::Pending
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.bound(cx, r)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.bound(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.bound(cx, r)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.bound(cx, r)
    }
}
