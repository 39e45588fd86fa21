//! The 2026-07-28 mirrored headers (SEP-2243): `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` and `Mcp-Param-{Name}` must repeat what the body says, so that gateways can route
//! on headers alone. A missing or different header is `400` with `-32020`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use serde_json::{Map, Value};

use super::super::request_headers::only;
use crate::catalog::ToolDef;

/// Decodes `=?base64?...?=`; a value without the wrapper is literal. `None`: bad base64.
pub(crate) fn decode_value(v: &str) -> Option<String> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => STANDARD
            .decode(b64)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(v.to_string()),
    }
}

/// A mirrored header's one value. Repeated, it names no one value: a gateway that routes or
/// authorizes on another copy than the one checked here would see another call than the one
/// that runs, which is what mirroring exists to prevent.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    let Some(v) = only(headers, name) else {
        return Ok(None);
    };
    let Some(v) = v else {
        return Err(format!("Header mismatch: {name} header is repeated"));
    };
    v.to_str()
        .map(|s| Some(s.trim()))
        .map_err(|_| format!("{name} header has invalid characters"))
}

/// Checks `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` against the body. The error is
/// the message of the `-32020` answer.
pub(crate) fn check_standard(
    headers: &HeaderMap,
    version: &str,
    method: &str,
    params: &Map<String, Value>,
) -> Result<(), String> {
    match header(headers, "mcp-protocol-version")? {
        None => return Err("Header mismatch: MCP-Protocol-Version header is required".into()),
        Some(h) if h != version => {
            return Err(format!(
                "Header mismatch: MCP-Protocol-Version header value '{h}' does not match body value '{version}'"
            ));
        }
        Some(_) => {}
    }
    match header(headers, "mcp-method")? {
        None => return Err("Header mismatch: Mcp-Method header is required".into()),
        Some(h) if h != method => {
            return Err(format!(
                "Header mismatch: Mcp-Method header value '{h}' does not match body value '{method}'"
            ));
        }
        Some(_) => {}
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
        _ => return Ok(()),
    };
    let body = named.and_then(Value::as_str).unwrap_or("");
    match header(headers, "mcp-name")? {
        None => Err("Header mismatch: Mcp-Name header is required".into()),
        Some(h) => match decode_value(h) {
            None => Err("Header mismatch: Mcp-Name header is not valid base64".into()),
            // Compared as decoded: the raw value was trimmed, and what base64 carries (the
            // spaces around a value are why it was encoded) is the value.
            Some(v) if v != body => Err(format!(
                "Header mismatch: Mcp-Name header value '{v}' does not match body value '{body}'"
            )),
            Some(_) => Ok(()),
        },
    }
}

/// Checks the `Mcp-Param-{Name}` headers of a tool call against its arguments.
pub(crate) fn check_params(
    headers: &HeaderMap,
    tool: &ToolDef,
    args: &Map<String, Value>,
) -> Result<(), String> {
    for (header_name, property) in tool.header_params() {
        let name = format!("mcp-param-{}", header_name.to_ascii_lowercase());
        let sent = header(headers, &name)?;
        // The argument as its header writes it, and whether it is a number.
        let expected = match args.get(property) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some((s.clone(), false)),
            Some(Value::Bool(b)) => Some((b.to_string(), false)),
            Some(Value::Number(n)) => Some((n.to_string(), true)),
            Some(_) => None,
        };
        match (sent, expected) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(format!(
                    "Header mismatch: Mcp-Param-{header_name} header is required because argument '{property}' has a value"
                ));
            }
            (Some(_), None) => {
                return Err(format!(
                    "Header mismatch: Mcp-Param-{header_name} header is set but argument '{property}' is absent"
                ));
            }
            (Some(h), Some((body, numeric))) => {
                let decoded = decode_value(h).ok_or_else(|| {
                    format!("Header mismatch: Mcp-Param-{header_name} header is not valid base64")
                })?;
                // Only a number may be written another way (`42.0` for `42`); a string is the
                // value as decoded (`"1e3"` is not `1000`, and base64's spaces are its own).
                let same = decoded == body
                    || numeric
                        && matches!((decoded.trim().parse::<f64>(), body.parse::<f64>()), (Ok(a), Ok(b)) if a == b);
                if !same {
                    return Err(format!(
                        "Header mismatch: Mcp-Param-{header_name} header value '{decoded}' does not match body value '{body}'"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    /// Found by review: a string argument was compared as a number (`"1e3"` matched a header
    /// `1000`), and a value decoded from base64 was trimmed, so a name or argument with spaces
    /// around it (what base64 exists to carry) never matched its own header.
    #[test]
    fn strings_are_compared_as_sent_and_only_numbers_as_numbers() {
        let tool = crate::catalog::tool("t")
            .input_schema(json!({"type": "object", "properties": {
                "s": {"type": "string", "x-mcp-header": "S"},
                "n": {"type": "integer", "x-mcp-header": "N"}}}))
            .raw_handler(|_: Value, _| async { Ok("") });
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert!(
            check_params(
                &hm(&[("mcp-param-s", "1000")]),
                &tool,
                &args(json!({"s": "1e3"}))
            )
            .is_err()
        );
        assert!(
            check_params(
                &hm(&[("mcp-param-n", "1000.0")]),
                &tool,
                &args(json!({"n": 1000}))
            )
            .is_ok()
        );
        let spaced = format!("=?base64?{}?=", STANDARD.encode(" x "));
        assert!(
            check_params(
                &hm(&[("mcp-param-s", &spaced)]),
                &tool,
                &args(json!({"s": " x "}))
            )
            .is_ok()
        );
        assert!(
            check_params(
                &hm(&[("mcp-param-s", &spaced)]),
                &tool,
                &args(json!({"s": "x"}))
            )
            .is_err()
        );
        let p = args(json!({"name": " x "}));
        let h = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", &spaced),
        ]);
        assert!(check_standard(&h, "2026-07-28", "tools/call", &p).is_ok());
    }

    #[test]
    fn a_repeated_mirrored_header_names_no_value() {
        let p = json!({"name": "echo"}).as_object().cloned().unwrap();
        let mut h = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ]);
        assert!(check_standard(&h, "2026-07-28", "tools/call", &p).is_ok());
        h.append("mcp-name", http::HeaderValue::from_static("echo"));
        let err = check_standard(&h, "2026-07-28", "tools/call", &p).unwrap_err();
        assert!(err.contains("mcp-name header is repeated"), "{err}");
    }

    #[test]
    fn standard_headers_must_mirror_the_body() {
        let p = json!({"name": "echo"}).as_object().cloned().unwrap();
        let ok = hm(&[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", " echo "),
        ]);
        assert!(check_standard(&ok, "2026-07-28", "tools/call", &p).is_ok());
        let b64 = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?ZWNobw==?="),
        ]);
        assert!(check_standard(&b64, "2026-07-28", "tools/call", &p).is_ok());
        let bad = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?!!?="),
        ]);
        assert!(check_standard(&bad, "2026-07-28", "tools/call", &p).is_err());
        let case = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "TOOLS/CALL"),
            ("mcp-name", "echo"),
        ]);
        assert!(check_standard(&case, "2026-07-28", "tools/call", &p).is_err());
        let missing = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
        ]);
        assert!(
            check_standard(&missing, "2026-07-28", "tools/call", &p)
                .unwrap_err()
                .contains("Mcp-Name")
        );
        let version = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ]);
        assert!(check_standard(&version, "v999.0.0", "tools/list", &p).is_err());
    }
}

/// Property tests of the mirrored headers: any header value gives a `-32020` message or
/// agreement, never a panic, and a header that mirrors the body, plainly or in base64, agrees.
#[cfg(test)]
mod props {
    use super::*;
    use base64::Engine;
    use http::HeaderValue;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::testing::prop_config as config;

    /// Bytes a header value may hold (visible ASCII, space, tab, obs-text), no edge spaces.
    fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![0x21u8..=0x7e, Just(b' '), Just(b'\t'), 0x80u8..=0xff],
            0..24,
        )
    }

    fn wrap(s: &str) -> String {
        format!("=?base64?{}?=", STANDARD.encode(s))
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Base64 in the wrapper decodes back to the text; a value without it is literal; bad
        /// base64 or non-UTF-8 bytes inside it are `None`.
        #[test]
        fn decode_value_round_trips(text in any::<String>(), raw in prop::collection::vec(any::<u8>(), 0..16), junk in "[^A-Za-z0-9+/=]{1,4}") {
            prop_assert_eq!(decode_value(&wrap(&text)), Some(text.clone()));
            if !(text.starts_with("=?base64?") && text.ends_with("?=")) {
                prop_assert_eq!(decode_value(&text), Some(text.clone()));
            }
            let encoded = STANDARD.encode(&raw);
            prop_assert_eq!(
                decode_value(&format!("=?base64?{encoded}?=")),
                String::from_utf8(raw).ok()
            );
            prop_assert_eq!(decode_value(&format!("=?base64?{encoded}{junk}?=")), None);
        }

        /// Headers that mirror the body agree, plain or base64, with spaces around; any other
        /// value of any one header is a `Header mismatch`, never a panic.
        #[test]
        fn check_standard_agrees_only_with_mirrors(
            method in prop::sample::select(vec!["tools/call", "prompts/get", "resources/read", "tasks/get", "tools/list", "ping"]),
            name in "[a-zA-Z0-9_./:é -]{0,16}",
            b64 in any::<bool>(),
            which in 0usize..3,
            bad in header_bytes(),
        ) {
            let key = match method {
                "resources/read" => "uri",
                "tasks/get" => "taskId",
                _ => "name",
            };
            let params = json!({ key: name }).as_object().cloned().expect("object");
            let version = "2026-07-28";
            // A non-ASCII or edge-spaced name can only be sent in base64.
            let plain_ok = name.is_ascii() && name.trim() == name;
            let name_header = if b64 || !plain_ok { wrap(&name) } else { format!(" {name} ") };
            let mut h = HeaderMap::new();
            h.insert("mcp-protocol-version", HeaderValue::from_static(version));
            h.insert("mcp-method", HeaderValue::from_str(method).expect("ASCII"));
            h.insert("mcp-name", HeaderValue::from_str(&name_header).expect("ASCII"));
            prop_assert_eq!(check_standard(&h, version, method, &params), Ok(()));

            let header = ["mcp-protocol-version", "mcp-method", "mcp-name"][which];
            let value = HeaderValue::from_bytes(&bad).expect("valid header bytes");
            let same = match header {
                "mcp-protocol-version" => value.to_str().is_ok_and(|v| v.trim() == version),
                "mcp-method" => value.to_str().is_ok_and(|v| v.trim() == method),
                _ => value
                    .to_str()
                    .ok()
                    .and_then(|v| decode_value(v.trim()))
                    .is_some_and(|v| v == name),
            };
            h.insert(header, value);
            let checked = check_standard(&h, version, method, &params);
            let named = matches!(method, "tools/call" | "prompts/get" | "resources/read" | "tasks/get");
            if same || (header == "mcp-name" && !named) {
                prop_assert_eq!(checked, Ok(()));
            } else {
                let e = checked.expect_err("a different header is refused");
                prop_assert!(e.starts_with("Header mismatch") || e.ends_with("invalid characters"), "{}", e);
            }
        }

    }

    proptest! {
        // Each case compiles the tool's JSON Schema, slow in a debug build.
        #![proptest_config(config(256))]

        /// `Mcp-Param-*`: a header that mirrors the argument (plainly, in base64, or as the same
        /// number) agrees; an absent argument with a header, or any other value, is refused.
        #[test]
        fn check_params_agrees_only_with_mirrors(
            region in prop::option::of("[a-z0-9-]{0,10}"),
            count in prop::option::of(any::<i32>()),
            sent_region in prop::option::of(header_bytes()),
            b64 in any::<bool>(),
        ) {
            let tool = crate::catalog::tool("regional")
                .input_schema(json!({"type": "object", "properties": {
                    "region": {"type": "string", "x-mcp-header": "Region"},
                    "count": {"type": "integer", "x-mcp-header": "Count"}}}))
                .raw_handler(|_: Value, _| async { Ok("") });
            let mut args = Map::new();
            let mut h = HeaderMap::new();
            if let Some(r) = &region {
                args.insert("region".into(), json!(r));
                let v = if b64 { wrap(r) } else { r.clone() };
                h.insert("mcp-param-region", HeaderValue::from_str(&v).expect("ASCII"));
            }
            if let Some(c) = count {
                args.insert("count".into(), json!(c));
                // Numbers may be written differently (`+7`, `7.0`) and still agree.
                h.insert("mcp-param-count", HeaderValue::from_str(&format!("{}.0", c)).expect("ASCII"));
            }
            prop_assert_eq!(check_params(&h, &tool, &args), Ok(()));

            // Now replace the region header by arbitrary bytes, or drop it.
            match &sent_region {
                Some(bytes) => {
                    h.insert("mcp-param-region", HeaderValue::from_bytes(bytes).expect("valid header bytes"));
                }
                None => {
                    h.remove("mcp-param-region");
                }
            }
            let sent = sent_region
                .as_ref()
                .map(|b| std::str::from_utf8(b).ok().map(str::trim).and_then(decode_value));
            let agrees = match (&sent, &region) {
                (None, None) => true,
                (Some(Some(v)), Some(r)) => {
                    v.trim() == r.as_str()
                        || matches!((v.trim().parse::<f64>(), r.parse::<f64>()), (Ok(a), Ok(b)) if a == b)
                }
                _ => false,
            };
            let checked = check_params(&h, &tool, &args);
            if agrees {
                prop_assert_eq!(checked, Ok(()));
            } else {
                let e = checked.expect_err("a header that does not mirror the argument");
                prop_assert!(e.starts_with("Header mismatch") || e.ends_with("invalid characters"), "{}", e);
            }
        }
    }
}
