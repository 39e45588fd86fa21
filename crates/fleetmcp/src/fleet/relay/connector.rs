//! The relay's sockets to holders: each opened within [`CONNECT_TIMEOUT`](super::CONNECT_TIMEOUT)
//! with `TCP_NODELAY`, and each holding a place of the connection budget (`http.max_connections`)
//! for as long as it is open, so relayed requests and client connections share one bound.

use std::pin::Pin;
use std::task::{Context, Poll};

use http::uri::{Authority, PathAndQuery, Scheme};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tower::Service;

use super::PLACE_WAIT;
use crate::limits::Connections;

/// Whether the connector found no place under `http.max_connections` for a new socket
/// (somewhere in the error's chain).
pub(super) fn no_place(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<NoPlace>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// No place left under `http.max_connections` for a new socket to a holder.
#[derive(Debug)]
struct NoPlace;

impl std::fmt::Display for NoPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no connection left under http.max_connections")
    }
}

impl std::error::Error for NoPlace {}

/// Opens the hop's sockets (resolving the holder's advertised name, bounded by
/// [`CONNECT_TIMEOUT`](super::CONNECT_TIMEOUT), `TCP_NODELAY`), each holding a place of the
/// connection budget for as long as it is open, waiting at most [`PLACE_WAIT`] for one.
pub(super) struct CountedConnector {
    pub http: HttpConnector,
    pub connections: Connections,
}

/// Any error of a hop (the socket's, the HTTP exchange's), for [`no_place`] and the log.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl CountedConnector {
    /// A socket to the holder at `holder`, with its place (waited for, at most [`PLACE_WAIT`]).
    pub async fn connect(&self, holder: &Authority) -> Result<Counted, BoxError> {
        let place = self
            .connections
            .take_within(PLACE_WAIT)
            .await
            .ok_or(NoPlace)?;
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(holder.clone());
        parts.path_and_query = Some(PathAndQuery::from_static("/"));
        let dst = http::Uri::from_parts(parts)?;
        let mut http = self.http.clone();
        let io = tower::ServiceExt::ready(&mut http).await?.call(dst).await?;
        Ok(Counted { io, _place: place })
    }
}

/// A socket to a holder and its place in the connection budget, given back when it closes.
pub(super) struct Counted {
    io: TokioIo<TcpStream>,
    _place: OwnedSemaphorePermit,
}

impl hyper::rt::Read for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
