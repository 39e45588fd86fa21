//! The hop end to end: a request signed by one instance, checked by another, and every change
//! on the way, every stale, replayed or foreign request refused.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use http::{HeaderMap, HeaderValue, Method, header};

use super::header::parse_auth;
use super::mac::mac_of;
use super::{
    RELAY_AUTH, RELAY_HOST, RELAY_SEALED, RELAYED_BY, RelayKeys, Subject, Unverified, Verifier,
};

const SECRET: &[u8] = b"the fleet's current secret";
const OLD: &[u8] = b"the fleet's previous secret";
const TOKEN: &str = "Bearer very-secret-token-42";
const NOW: u64 = 1_800_000_000_000;
const WINDOW: u64 = 30_000;
const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#;

fn client_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    h.insert("mcp-session-id", HeaderValue::from_static("sid-1"));
    h.insert(header::AUTHORIZATION, HeaderValue::from_static(TOKEN));
    h.append(header::COOKIE, HeaderValue::from_static("a=1"));
    h.append(header::COOKIE, HeaderValue::from_static("b=2"));
    h
}

fn subject<'a>(source: &'a str, target: &'a str, path: &'a str, body: &'a [u8]) -> Subject<'a> {
    Subject {
        source: source.as_bytes(),
        target: target.as_bytes(),
        method: &Method::POST,
        path,
        body,
    }
}

/// A request from `desk-b` to `desk-a`, signed under `keys` at `at`, as it arrives.
fn signed_with(keys: &RelayKeys, at: u64) -> HeaderMap {
    let mut h = client_headers();
    keys.sign(&subject("desk-b", "desk-a", "/mcp?x=1", BODY), &mut h, at)
        .unwrap();
    h
}

fn signed() -> HeaderMap {
    signed_with(&RelayKeys::new(SECRET, &[]), NOW)
}

fn verifier(current: &[u8], previous: &[&[u8]]) -> Verifier {
    Verifier::new(RelayKeys::new(current, previous), "desk-a", WINDOW)
}

fn check(v: &Verifier, h: &mut HeaderMap) -> Result<(), Unverified> {
    v.check(&Method::POST, "/mcp?x=1", h, BODY, NOW)
}

/// A change made to a request on the way.
type Tamper = Box<dyn Fn(&mut HeaderMap)>;

/// Replaces one `;` field of the relay header.
fn with_auth_field(h: &mut HeaderMap, index: usize, value: &str) {
    let auth = h.get(RELAY_AUTH).unwrap().to_str().unwrap().to_string();
    let mut fields: Vec<&str> = auth.split(';').collect();
    fields[index] = value;
    h.insert(
        RELAY_AUTH,
        HeaderValue::from_str(&fields.join(";")).unwrap(),
    );
}

#[test]
fn round_trip_restores_the_clients_headers_and_seals_its_credentials() {
    let mut h = signed();
    // On the wire: no credential in clear, anywhere.
    assert!(h.get(header::AUTHORIZATION).is_none());
    assert!(h.get(header::COOKIE).is_none());
    for (_, v) in &h {
        let v = String::from_utf8_lossy(v.as_bytes());
        assert!(!v.contains("very-secret-token"), "{v}");
        assert!(!v.contains("a=1"), "{v}");
    }
    assert_eq!(h.get(RELAYED_BY).unwrap(), "desk-b");
    assert!(h.contains_key(RELAY_SEALED));

    check(&verifier(SECRET, &[]), &mut h).unwrap();
    let mut want = client_headers();
    want.insert(RELAYED_BY, HeaderValue::from_static("desk-b"));
    assert_eq!(
        h, want,
        "the holder sees what the client sent, plus the marker"
    );
    let cookies: Vec<_> = h.get_all(header::COOKIE).iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"], "repeated values keep their order");
}

#[test]
fn a_request_without_credentials_or_accept_verifies_and_gets_the_clients_default_accept() {
    let keys = RelayKeys::new(SECRET, &[]);
    let mut h = HeaderMap::new();
    h.insert("mcp-session-id", HeaderValue::from_static("sid-1"));
    keys.sign(&subject("desk-b", "desk-a", "/mcp", b""), &mut h, NOW)
        .unwrap();
    assert!(!h.contains_key(RELAY_SEALED));
    let v = verifier(SECRET, &[]);
    v.check(&Method::POST, "/mcp", &mut h, b"", NOW).unwrap();
    assert_eq!(h.get(header::ACCEPT).unwrap(), "*/*");
    assert_eq!(h.len(), 3, "{h:?}");
}

#[test]
fn anything_changed_on_the_way_does_not_verify() {
    let v = verifier(SECRET, &[]);
    let cases: Vec<(&str, Tamper)> = vec![
        (
            "a signed header's value",
            Box::new(|h| {
                h.insert("mcp-session-id", HeaderValue::from_static("sid-2"));
            }),
        ),
        (
            "a value added to a signed header",
            Box::new(|h| {
                h.append(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            }),
        ),
        (
            "a signed header removed",
            Box::new(|h| {
                h.remove(header::CONTENT_TYPE);
            }),
        ),
        (
            "the source",
            Box::new(|h| {
                h.insert(RELAYED_BY, HeaderValue::from_static("desk-c"));
            }),
        ),
        (
            "the timestamp",
            Box::new(|h| with_auth_field(h, 1, &(NOW + 1).to_string())),
        ),
        (
            "the nonce",
            Box::new(|h| with_auth_field(h, 2, &URL_SAFE_NO_PAD.encode([7u8; 16]))),
        ),
        (
            "the list of signed headers",
            Box::new(|h| with_auth_field(h, 3, "accept,content-type")),
        ),
        (
            "the MAC",
            Box::new(|h| with_auth_field(h, 4, &URL_SAFE_NO_PAD.encode([7u8; 32]))),
        ),
        (
            "the sealed credentials",
            Box::new(|h| {
                let other = signed();
                h.insert(RELAY_SEALED, other.get(RELAY_SEALED).unwrap().clone());
            }),
        ),
        (
            "the sealed credentials dropped",
            Box::new(|h| {
                h.remove(RELAY_SEALED);
            }),
        ),
    ];
    for (what, tamper) in cases {
        let mut h = signed();
        tamper(&mut h);
        assert_eq!(check(&v, &mut h), Err(Unverified::BadMac), "{what}");
    }
    let mut h = signed();
    let tampered_body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert_eq!(
        v.check(&Method::POST, "/mcp?x=1", &mut h, tampered_body, NOW),
        Err(Unverified::BadMac),
        "the body"
    );
    let mut h = signed();
    assert_eq!(
        v.check(&Method::POST, "/mcp?x=2", &mut h, BODY, NOW),
        Err(Unverified::BadMac),
        "the query"
    );
    let mut h = signed();
    assert_eq!(
        v.check(&Method::DELETE, "/mcp?x=1", &mut h, BODY, NOW),
        Err(Unverified::BadMac),
        "the method"
    );
    // Signed for desk-a; desk-c is not its target.
    let other = Verifier::new(RelayKeys::new(SECRET, &[]), "desk-c", WINDOW);
    assert_eq!(
        check(&other, &mut signed()),
        Err(Unverified::BadMac),
        "the target"
    );
    // Untouched, it still verifies (each case above failed for its change alone).
    check(&v, &mut signed()).unwrap();
}

#[test]
fn a_header_injected_on_the_way_is_dropped_and_a_clear_credential_is_not_trusted() {
    let v = verifier(SECRET, &[]);
    let mut h = signed();
    h.insert("x-injected", HeaderValue::from_static("1"));
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer forged"),
    );
    check(&v, &mut h).unwrap();
    assert!(!h.contains_key("x-injected"));
    let auth: Vec<_> = h.get_all(header::AUTHORIZATION).iter().collect();
    assert_eq!(auth, [TOKEN], "only the sealed credential");
}

#[test]
fn sealed_credentials_that_do_not_open_are_refused_even_under_a_valid_mac() {
    let keys = RelayKeys::new(SECRET, &[]);
    let mut h = signed();
    let raw = h.get(RELAY_AUTH).unwrap().clone();
    let auth = parse_auth(raw.as_bytes()).unwrap();
    // Only a holder of the key could do this: a MAC over a sealed blob that is not one.
    let junk = URL_SAFE_NO_PAD.encode([9u8; 40]);
    h.insert(RELAY_SEALED, HeaderValue::from_str(&junk).unwrap());
    let mac = mac_of(
        &keys.pairs[0],
        &subject("desk-b", "desk-a", "/mcp?x=1", BODY),
        auth.ts,
        &auth.nonce,
        &auth.names,
        &h,
        junk.as_bytes(),
    )
    .finalize()
    .into_bytes();
    with_auth_field(&mut h, 4, &URL_SAFE_NO_PAD.encode(mac));
    assert_eq!(
        check(&verifier(SECRET, &[]), &mut h),
        Err(Unverified::BadSeal)
    );
}

#[test]
fn missing_or_malformed_relay_headers_are_refused() {
    let v = verifier(SECRET, &[]);
    let mut h = client_headers();
    h.insert(RELAYED_BY, HeaderValue::from_static("desk-b"));
    assert_eq!(
        check(&v, &mut h),
        Err(Unverified::Incomplete),
        "no MAC at all"
    );
    let mut h = signed();
    h.remove(RELAYED_BY);
    assert_eq!(check(&v, &mut h), Err(Unverified::Incomplete), "no source");
    for bad in [
        "",
        "v1",
        "v2;1;AAAAAAAAAAAAAAAAAAAAAA;;AAAA",
        "v1;now;AAAAAAAAAAAAAAAAAAAAAA;;AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let mut h = signed();
        h.insert(RELAY_AUTH, HeaderValue::from_static(bad));
        assert_eq!(check(&v, &mut h), Err(Unverified::Malformed), "{bad:?}");
    }
    for names in [
        "content-type,accept",
        "accept,accept",
        "Accept",
        "accept,authorization",
        "accept,host",
    ] {
        let mut h = signed();
        with_auth_field(&mut h, 3, names);
        assert_eq!(check(&v, &mut h), Err(Unverified::Malformed), "{names:?}");
    }
    // A nonce or MAC of another length, padded, or too long to be one, does not parse.
    let long = "A".repeat(120);
    for (field, value) in [
        (2, "AAAA"),
        (2, "AAAAAAAAAAAAAAAAAAAAAAA"),
        (2, "AAAAAAAAAAAAAAAAAAAAAA=="),
        (4, "AAAAAAAAAAAAAAAAAAAAAA"),
        (4, long.as_str()),
    ] {
        let mut h = signed();
        with_auth_field(&mut h, field, value);
        assert_eq!(
            check(&v, &mut h),
            Err(Unverified::Malformed),
            "field {field}: {value:?}"
        );
    }
}

#[test]
fn a_stale_or_future_timestamp_is_refused() {
    let v = verifier(SECRET, &[]);
    let keys = RelayKeys::new(SECRET, &[]);
    for at in [NOW - WINDOW - 1, NOW + WINDOW + 1] {
        let mut h = signed_with(&keys, at);
        assert_eq!(check(&v, &mut h), Err(Unverified::Stale), "signed at {at}");
    }
    for at in [NOW - WINDOW, NOW + WINDOW] {
        let mut h = signed_with(&keys, at);
        assert_eq!(check(&v, &mut h), Ok(()), "signed at {at}");
    }
}

#[test]
fn another_secret_is_refused_and_a_previous_one_accepted() {
    let mut h = signed();
    assert_eq!(
        check(&verifier(b"another fleet's secret", &[]), &mut h),
        Err(Unverified::BadMac)
    );
    // Signed under OLD (an instance not yet rotated), checked by one rotating to SECRET.
    let mut h = signed_with(&RelayKeys::new(OLD, &[]), NOW);
    check(&verifier(SECRET, &[OLD]), &mut h).unwrap();
    assert_eq!(h.get(header::AUTHORIZATION).unwrap(), TOKEN, "unsealed too");
    // A rotating instance signs under the current secret only.
    let rotating = RelayKeys::new(SECRET, &[OLD]);
    assert_eq!(
        check(&verifier(OLD, &[]), &mut signed_with(&rotating, NOW)),
        Err(Unverified::BadMac)
    );
    check(&verifier(SECRET, &[]), &mut signed_with(&rotating, NOW)).unwrap();
}

#[test]
fn a_replay_is_refused_within_the_window_and_a_fresh_request_is_not() {
    let v = verifier(SECRET, &[]);
    let first = signed();
    check(&v, &mut first.clone()).unwrap();
    assert_eq!(check(&v, &mut first.clone()), Err(Unverified::Replayed));
    // A replay later, still within the window of its timestamp: still refused.
    assert_eq!(
        v.check(
            &Method::POST,
            "/mcp?x=1",
            &mut first.clone(),
            BODY,
            NOW + WINDOW
        ),
        Err(Unverified::Replayed)
    );
    check(&v, &mut signed()).unwrap();
}

#[test]
fn the_clients_host_replaces_the_hops_and_an_unsigned_one_is_dropped() {
    let v = verifier(SECRET, &[]);
    let keys = RelayKeys::new(SECRET, &[]);
    let mut h = client_headers();
    h.insert(RELAY_HOST, HeaderValue::from_static("mcp.example.com"));
    keys.sign(&subject("desk-b", "desk-a", "/mcp?x=1", BODY), &mut h, NOW)
        .unwrap();
    // The connection's own Host: the holder's advertised address.
    h.insert(header::HOST, HeaderValue::from_static("desk-a.peers:3000"));
    check(&v, &mut h).unwrap();
    let hosts: Vec<_> = h.get_all(header::HOST).iter().collect();
    assert_eq!(hosts, ["mcp.example.com"]);
    assert!(!h.contains_key(RELAY_HOST));

    // The client sent none: the holder sees none, not the hop's.
    let mut h = signed();
    h.insert(header::HOST, HeaderValue::from_static("desk-a.peers:3000"));
    check(&v, &mut h).unwrap();
    assert!(!h.contains_key(header::HOST), "{h:?}");

    // One added on the way is not signed: dropped like any other.
    let mut h = signed();
    h.insert(RELAY_HOST, HeaderValue::from_static("evil.example"));
    check(&v, &mut h).unwrap();
    assert!(!h.contains_key(header::HOST) && !h.contains_key(RELAY_HOST));
}

#[test]
fn a_hop_stamped_before_the_process_started_is_refused() {
    let v = verifier(SECRET, &[]).started_at(NOW - 1000);
    let keys = RelayKeys::new(SECRET, &[]);
    let mut before = signed_with(&keys, NOW - 1001);
    assert_eq!(check(&v, &mut before), Err(Unverified::BeforeStart));
    check(&v, &mut signed_with(&keys, NOW - 1000)).unwrap();
}

#[test]
fn signing_without_a_secret_fails() {
    let keys = RelayKeys { pairs: Vec::new() };
    let mut h = client_headers();
    assert!(
        keys.sign(&subject("desk-b", "desk-a", "/mcp", BODY), &mut h, NOW)
            .is_err()
    );
    let v = Verifier::new(RelayKeys { pairs: Vec::new() }, "desk-a", WINDOW);
    assert_eq!(check(&v, &mut signed()), Err(Unverified::BadMac));
}

#[test]
fn the_mac_of_a_fixed_request_stays_what_every_version_computes() {
    // Instances of two versions run side by side during a rolling upgrade, so what the MAC
    // covers, and how it is encoded, must not change: this is the MAC the first version
    // computed for this request.
    let keys = RelayKeys::new(SECRET, &[]);
    let mut h = client_headers();
    h.append("x-multi", HeaderValue::from_static("one"));
    h.append("x-multi", HeaderValue::from_static("two"));
    let names = ["accept", "content-type", "mcp-session-id", "x-multi"];
    let mac = mac_of(
        &keys.pairs[0],
        &subject("desk-b", "desk-a", "/mcp?x=1", BODY),
        NOW,
        &[7u8; 16],
        &names,
        &h,
        b"sealed",
    )
    .finalize()
    .into_bytes();
    assert_eq!(
        URL_SAFE_NO_PAD.encode(mac),
        "9EPzxX07XT_XsPLCSAv1sYqjiXuvgJ2s4QnumxPoRns"
    );
}
