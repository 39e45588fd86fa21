//! The HTTP client of a Streamable HTTP upstream: hyper-util's pooled client over TCP for
//! `http://`, and over TLS (rustls on ring) for `https://`, the server's certificate verified
//! against the system's roots plus `FLEETMCP_UPSTREAM_CA_FILE`, its name against the URL's
//! host. Never unverified: there is no switch for that.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// How long a connection (TCP, then TLS) may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A pooled client for one upstream server. Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl HttpClient {
    /// A client that trusts the system's roots and the certificates of `ca_file` (PEM), if
    /// given. `Err`: the file cannot be read or holds no certificate.
    pub fn new(ca_file: Option<&Path>) -> Result<Self, String> {
        let tls = tls_config(ca_file)?;
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        tcp.set_nodelay(true);
        // The connector takes https:// itself; hyper's own check would refuse it.
        tcp.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { client })
    }

    /// Sends one request; its response's head (the body is read with [`bytes`] or [`stream`]).
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Response<Incoming>, String> {
        let mut req = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        self.client.request(req).await.map_err(describe)
    }
}

/// A response's whole body, refused past `limit` bytes (not held whole).
pub async fn bytes(res: Response<Incoming>, limit: usize) -> Result<Bytes, String> {
    http_body_util::Limited::new(res.into_body(), limit)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| e.to_string())
}

/// A response's body as it arrives; ends at its end or at the first error.
pub fn stream(res: Response<Incoming>) -> BoxStream<'static, Bytes> {
    res.into_body()
        .into_data_stream()
        .take_while(|chunk| std::future::ready(chunk.is_ok()))
        .filter_map(|chunk| std::future::ready(chunk.ok()))
        .boxed()
}

/// rustls on ring, trusting the system's roots and `ca_file`'s certificates.
fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    // The system's roots: one it cannot parse is skipped (as every rustls client does); none at
    // all is fine when the CA file names the upstream's.
    let system = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("FLEETMCP_UPSTREAM_CA_FILE {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("FLEETMCP_UPSTREAM_CA_FILE {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "FLEETMCP_UPSTREAM_CA_FILE {}: no PEM certificate in it",
                path.display()
            ));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                format!(
                    "FLEETMCP_UPSTREAM_CA_FILE {}: a certificate rustls refuses: {e}",
                    path.display()
                )
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// An error with its causes (hyper-util's own says only "client error (Connect)").
fn describe(e: hyper_util::client::legacy::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
