//! The issuer's answers (JWKS, introspection) read with a byte bound. A timeout alone bounds
//! how long, not how much: an issuer (or whatever answers at its address) sending a body of
//! gigabytes within the timeout would be held whole in memory, once per concurrent fetch.

/// The most bytes of one issuer answer read. A JWKS of a few RSA keys is a few KB, an
/// introspection answer well under one; 1 MiB leaves room for key rotation with many keys
/// and certificate chains (`x5c`) while keeping a hostile answer cheap. Past it the fetch fails
/// as if the issuer did not answer: the token is refused (the keys already known stay).
pub(super) const MAX_ISSUER_BODY_BYTES: usize = 1 << 20;

/// The body of `res`, read chunk by chunk and failed as soon as it passes `max` bytes (a
/// `Content-Length` above it fails before any is read).
pub(super) async fn read_bounded(
    mut res: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, String> {
    let too_big = || format!("the answer is larger than {max} bytes, the most read");
    if res.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An issuer on loopback for the tests of this module's callers: answers every request with
/// `body` (`chunked`: without `Content-Length`, so the bound is met while reading). Its base URL.
/// Plain HTTP/1.1 on a socket: this layer names no HTTP crate (tests/layers.rs).
#[cfg(test)]
pub(super) async fn serve(body: String, chunked: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a test issuer");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    let body = std::sync::Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                // The request: its head, then as many bytes as its Content-Length says.
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                while req.len() < head_end + length {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n",
                );
                if chunked {
                    out.push_str("transfer-encoding: chunked\r\n\r\n");
                    for c in body.as_bytes().chunks(64 * 1024) {
                        out.push_str(&format!(
                            "{:x}\r\n{}\r\n",
                            c.len(),
                            String::from_utf8_lossy(c)
                        ));
                    }
                    out.push_str("0\r\n\r\n");
                } else {
                    out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
                }
                // The client may hang up once it has read enough: not an error here.
                let _ = conn.write_all(out.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    base
}
