//! What the listener keeps for the whole life of a connection, whatever its requests (issue 37:
//! an idle SSE stream holds its connection for hours, and each of these bytes with it).

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use hyper::service::Service;

use super::listener::{Activity, ConnectionBounds, Mode, requests};
use crate::config::HttpConfig;
use crate::limits::Connections;
use crate::{Config, Server};

/// The bytes of the place hyper allocates, once per connection, for the service's future
/// (`Box::pin(None)` in hyper 1's `proto/h1/dispatch.rs`, kept until the connection closes).
fn place_of<S: Service<Request<Incoming>>>(_: &S) -> usize {
    std::mem::size_of::<Option<S::Future>>()
}

#[tokio::test]
async fn a_connection_keeps_a_pointer_to_its_request_in_flight_not_the_request() {
    let config = Config {
        session_secret: Some("listener-test-secret-0123456789abcdef".into()),
        ..Config::default()
    };
    let running = Server::builder("listener-test", "1.0.0")
        .config(config)
        .build()
        .start()
        .await
        .unwrap();
    let limits = ConnectionBounds::from_config(&HttpConfig::default(), Connections::new(8));
    let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let service = requests(
        peer,
        running.routes.clone(),
        Mode::Full,
        &limits,
        Arc::new(Activity::new()),
    );
    // The routes' own future is about 6 KB (`transport::http::future_sizes`); kept in that place,
    // it stayed allocated on every connection after its request was answered.
    let place = place_of(&service);
    assert!(
        place <= 2 * std::mem::size_of::<usize>(),
        "hyper keeps {place} B a connection for the request in flight"
    );
}
