//! The 2026-07-28 mirrored headers (SEP-2243): `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` and `Mcp-Param-{Name}` must repeat what the body says, so that gateways can route
//! on headers alone. A missing or different header is `400` with `-32020`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use serde_json::{Map, Value};

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

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim()))
            .map_err(|_| format!("{name} header has invalid characters")),
    }
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
            Some(v) if v.trim() != body => Err(format!(
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
        let expected = match args.get(property) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(Value::Number(n)) => Some(n.to_string()),
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
            (Some(h), Some(body)) => {
                let decoded = decode_value(h).ok_or_else(|| {
                    format!("Header mismatch: Mcp-Param-{header_name} header is not valid base64")
                })?;
                let same = decoded.trim() == body
                    || matches!((decoded.trim().parse::<f64>(), body.parse::<f64>()), (Ok(a), Ok(b)) if a == b);
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
