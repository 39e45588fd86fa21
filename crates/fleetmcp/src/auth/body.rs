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
#[cfg(test)]
pub(super) async fn serve(body: String, chunked: bool) -> String {
    use axum::body::Body;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a test issuer");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    let answer = move || {
        let body = body.clone();
        async move {
            let b = if chunked {
                let parts: Vec<Result<String, std::io::Error>> = body
                    .as_bytes()
                    .chunks(64 * 1024)
                    .map(|c| Ok(String::from_utf8_lossy(c).into_owned()))
                    .collect();
                Body::from_stream(tokio_stream::iter(parts))
            } else {
                Body::from(body)
            };
            axum::response::Response::builder()
                .header("content-type", "application/json")
                .body(b)
                .expect("a test answer")
        }
    };
    let app = axum::Router::new().fallback(answer);
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}
