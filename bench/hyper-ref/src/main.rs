//! The limit of bench/run.sh: a bare hyper (HTTP/1.1, TCP_NODELAY) server that answers the
//! load generator's exchanges with the bytes help-desk answers them with, and does nothing
//! else: no sessions, no validation, no dispatch. It parses each body once, as any server must
//! to echo the JSON-RPC id. `PORT` sets the port (default 3000).
//!
//! With `UPSTREAM=host:port` it is instead a bare proxy in front of another server: each
//! request, its body read whole, goes on over a pooled keep-alive connection (hyper-util's
//! client, the one the relay hop uses, `TCP_NODELAY`) and the answer's body is passed back as
//! it comes. Nothing is signed or checked: `bench/run.sh`'s `hyper_proxied` target measures
//! what one HTTP hop over loopback costs at the least, the floor of a relayed call's extra
//! latency.

use std::convert::Infallible;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

const SESSION: &str = "hyper-ref-session";
const INITIALIZED: &str = r#"{"capabilities":{"completions":{},"logging":{},"prompts":{"listChanged":true},"resources":{"listChanged":true,"subscribe":true},"tools":{"listChanged":true}},"instructions":"A help desk: open, find and close tickets; read the service levels.","protocolVersion":"2025-11-25","serverInfo":{"name":"help-desk","version":"0.1.0"}}"#;
const TICKETS: &str = r#"{"content":[{"type":"text","text":"{\"tickets\":[]}"}],"structuredContent":{"tickets":[]},"isError":false}"#;

fn answer(status: StatusCode, body: String, session: bool) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert("content-type", "application/json".parse().expect("static"));
    if session {
        h.insert("mcp-session-id", SESSION.parse().expect("static"));
    }
    res
}

async fn serve(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == Method::DELETE {
        return Ok(answer(StatusCode::NO_CONTENT, String::new(), false));
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(answer(StatusCode::BAD_REQUEST, String::new(), false)),
    };
    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = msg.get("id").map(Value::to_string);
    let Some(id) = id else {
        return Ok(answer(StatusCode::ACCEPTED, String::new(), false));
    };
    let (result, session) = match msg.get("method").and_then(Value::as_str) {
        Some("initialize") => (INITIALIZED, true),
        _ => (TICKETS, false),
    };
    Ok(answer(
        StatusCode::OK,
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
        session,
    ))
}

/// The proxy's client: pooled HTTP/1.1 keep-alive, `TCP_NODELAY`.
type ProxyClient = Client<HttpConnector, Full<Bytes>>;

/// Passes `req` on to `upstream` (`host:port`) and its answer back.
async fn proxy(
    client: ProxyClient,
    upstream: &str,
    req: Request<Incoming>,
) -> Result<Response<Incoming>, String> {
    let (mut parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("http://{upstream}{path}")
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
    client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let upstream: Option<&'static str> = std::env::var("UPSTREAM")
        .ok()
        .map(|u| &*Box::leak(u.into_boxed_str()));
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: ProxyClient = Client::builder(TokioExecutor::new()).build(connector);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let client = client.clone();
        tokio::spawn(async move {
            let conn = http1::Builder::new();
            let _ = match upstream {
                Some(upstream) => {
                    conn.serve_connection(
                        TokioIo::new(stream),
                        service_fn(move |req| {
                            let client = client.clone();
                            async move {
                                Ok::<_, Infallible>(match proxy(client, upstream, req).await {
                                    Ok(res) => res.map(http_body_util::Either::Left),
                                    Err(e) => answer(StatusCode::BAD_GATEWAY, e, false)
                                        .map(http_body_util::Either::Right),
                                })
                            }
                        }),
                    )
                    .await
                }
                None => {
                    conn.serve_connection(TokioIo::new(stream), service_fn(serve))
                        .await
                }
            };
        });
    }
}
