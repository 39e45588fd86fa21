//! JSON-RPC 2.0 envelopes.
//!
//! Incoming messages are parsed once into [`Incoming`], whose `id`, `params`, `result` and `error`
//! stay raw JSON: dispatch only needs `method`, and each method parses its own params into the
//! type it wants. Outgoing messages are written straight into a byte buffer.

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::ErrorData;

/// One JSON-RPC message as received, before it is classified. Only a JSON object is one: a
/// derived `Deserialize` would also read an array positionally (`["2.0",1,"ping"]` as a
/// request), which JSON-RPC does not allow.
#[derive(Debug)]
pub struct Incoming {
    pub jsonrpc: Option<String>,
    pub id: Option<Box<RawValue>>,
    pub method: Option<String>,
    pub params: Option<Box<RawValue>>,
    pub result: Option<Box<RawValue>>,
    pub error: Option<Box<RawValue>>,
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectOnly;
        impl<'de> Visitor<'de> for ObjectOnly {
            type Value = Incoming;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON-RPC message (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Incoming, A::Error> {
                // The values are still read by the original deserializer, so raw ids stay raw.
                Fields::deserialize(MapAccessDeserializer::new(map)).map(Fields::into_incoming)
            }
        }
        d.deserialize_map(ObjectOnly)
    }
}

/// The fields of [`Incoming`], read from an object's entries.
#[derive(Deserialize)]
struct Fields {
    #[serde(default)]
    jsonrpc: Option<String>,
    #[serde(default)]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<Box<RawValue>>,
}

impl Fields {
    fn into_incoming(self) -> Incoming {
        Incoming {
            jsonrpc: self.jsonrpc,
            id: self.id,
            method: self.method,
            params: self.params,
            result: self.result,
            error: self.error,
        }
    }
}

/// A classified message.
#[derive(Debug)]
pub enum Message {
    Request {
        id: Box<RawValue>,
        method: String,
        params: Option<Box<RawValue>>,
    },
    Notification {
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// An answer to a request this server sent to the client (sampling, elicitation, roots).
    Response {
        id: Box<RawValue>,
        outcome: Result<Box<RawValue>, Box<RawValue>>,
    },
}

impl Incoming {
    /// Classifies the message, or says why it is not valid JSON-RPC. The error carries the id
    /// when one could be read, so the answer can name the request.
    pub fn classify(self) -> Result<Message, (Option<Box<RawValue>>, ErrorData)> {
        if self.jsonrpc.as_deref() != Some("2.0") {
            return Err((
                self.id,
                super::errors::invalid_request("Invalid Request: jsonrpc must be \"2.0\""),
            ));
        }
        // `"id": null` is not a valid request id; serde maps it to a raw `null`.
        let id = self.id.filter(|id| id.get() != "null");
        match (self.method, id) {
            (Some(method), Some(id)) => Ok(Message::Request {
                id,
                method,
                params: self.params,
            }),
            (Some(method), None) => Ok(Message::Notification {
                method,
                params: self.params,
            }),
            (None, Some(id)) => match (self.result, self.error) {
                (Some(result), None) => Ok(Message::Response {
                    id,
                    outcome: Ok(result),
                }),
                (None, Some(error)) => Ok(Message::Response {
                    id,
                    outcome: Err(error),
                }),
                _ => Err((
                    Some(id),
                    super::errors::invalid_request("Invalid Request: missing method"),
                )),
            },
            (None, None) => Err((
                None,
                super::errors::invalid_request("Invalid Request: missing method"),
            )),
        }
    }
}

const NULL_ID: &str = "null";

fn write_head(buf: &mut Vec<u8>, id: Option<&RawValue>) {
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    buf.extend_from_slice(id.map_or(NULL_ID, |id| id.get()).as_bytes());
}

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`.
pub fn encode_result<T: Serialize + ?Sized>(id: &RawValue, result: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    write_head(&mut buf, Some(id));
    buf.extend_from_slice(b",\"result\":");
    if serde_json::to_writer(&mut buf, result).is_err() {
        // Serialising our own result types cannot fail short of a bug; answer honestly.
        return encode_error(
            Some(id),
            &super::errors::internal("result serialisation failed"),
        );
    }
    buf.push(b'}');
    Bytes::from(buf)
}

/// `{"jsonrpc":"2.0","id":<id or null>,"error":{...}}`.
pub fn encode_error(id: Option<&RawValue>, error: &ErrorData) -> Bytes {
    let mut buf = Vec::with_capacity(128);
    write_head(&mut buf, id);
    buf.extend_from_slice(b",\"error\":");
    // ErrorData is plain data; if it somehow fails, fall back to a fixed internal error.
    if serde_json::to_writer(&mut buf, error).is_err() {
        buf.truncate(0);
        write_head(&mut buf, id);
        buf.extend_from_slice(b",\"error\":{\"code\":-32603,\"message\":\"Internal error\"}");
    }
    buf.push(b'}');
    Bytes::from(buf)
}

/// `{"jsonrpc":"2.0","method":<method>,"params":<params>}`.
pub fn encode_notification<T: Serialize + ?Sized>(method: &str, params: &T) -> Bytes {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    let _ = serde_json::to_writer(&mut buf, method);
    buf.extend_from_slice(b",\"params\":");
    if serde_json::to_writer(&mut buf, params).is_err() {
        buf.extend_from_slice(b"{}");
    }
    buf.push(b'}');
    Bytes::from(buf)
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}` for server-to-client requests.
pub fn encode_request<T: Serialize + ?Sized>(id: &str, method: &str, params: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let _ = serde_json::to_writer(&mut buf, id);
    buf.extend_from_slice(b",\"method\":");
    let _ = serde_json::to_writer(&mut buf, method);
    buf.extend_from_slice(b",\"params\":");
    if serde_json::to_writer(&mut buf, params).is_err() {
        buf.extend_from_slice(b"{}");
    }
    buf.push(b'}');
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Message, (Option<Box<RawValue>>, ErrorData)> {
        serde_json::from_str::<Incoming>(s).unwrap().classify()
    }

    #[test]
    fn classifies_each_kind() {
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#),
            Ok(Message::Request { .. })
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Message::Notification { .. })
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#),
            Ok(Message::Response { outcome: Ok(_), .. })
        ));
        let (id, err) = parse(r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#).unwrap_err();
        assert_eq!(id.unwrap().get(), "3");
        assert_eq!(err.code.0, -32600);
    }

    /// Found by the property tests: the derived `Deserialize` read a JSON array positionally,
    /// so `["2.0",7,"ping"]` (alone at `/message`, or as a batch item) was served as a ping.
    #[test]
    fn an_array_is_not_a_message() {
        for text in [r#"["2.0",7,"ping"]"#, "[]", r#"["2.0"]"#] {
            assert!(
                serde_json::from_str::<Incoming>(text).is_err(),
                "{text} must not parse as a message"
            );
        }
        // Objects still are, with raw ids and duplicate fields refused as before.
        let m = serde_json::from_str::<Incoming>(r#"{"jsonrpc":"2.0","id": "x" ,"method":"ping"}"#)
            .unwrap();
        assert_eq!(m.id.unwrap().get(), r#""x""#);
        assert!(serde_json::from_str::<Incoming>(r#"{"id":1,"id":2}"#).is_err());
    }

    #[test]
    fn answers_echo_the_raw_id() {
        let id = RawValue::from_string("\"abc\"".into()).unwrap();
        let out = encode_result(&id, &serde_json::json!({}));
        assert_eq!(&out[..], br#"{"jsonrpc":"2.0","id":"abc","result":{}}"#);
        let out = encode_error(None, &crate::protocol::errors::parse_error("x"));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], -32700);
    }
}
