//! The limit of bench/run.sh: a bare hyper (HTTP/1.1, TCP_NODELAY) server that answers the
//! load generator's exchanges with the bytes help-desk answers them with, and does nothing
//! else: no sessions, no validation, no dispatch. It parses each body once, as any server must
//! to echo the JSON-RPC id. `PORT` sets the port (default 3000).

use std::convert::Infallible;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
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

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(serve))
                .await;
        });
    }
}
