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
    /// Whether `jsonrpc` is `"2.0"` (only that is a valid message).
    pub jsonrpc_2_0: bool,
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
    jsonrpc: Option<Version>,
    /// `null` kept as a raw `null` (an `Option` would read it as absent): a request with
    /// `"id": null` is not a notification.
    #[serde(default, deserialize_with = "present")]
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

/// `jsonrpc`'s value judged where it lies, in the body being read (or the parser's scratch
/// buffer for a string with escapes): every message has one, and a `String` of it was an
/// allocation per message only to be compared with `"2.0"` (issue 23). Anything but a string is
/// refused as `String` refused it, with the same error.
struct Version(bool);

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Judge;
        impl Visitor<'_> for Judge {
            type Value = Version;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                // `String`'s own word, so a wrong type is answered as it always was.
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Version, E> {
                Ok(Version(v == "2.0"))
            }
        }
        d.deserialize_str(Judge)
    }
}

/// A field that is there, whatever its value (`null` included).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

impl Fields {
    fn into_incoming(self) -> Incoming {
        Incoming {
            jsonrpc_2_0: self.jsonrpc.is_some_and(|v| v.0),
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
        // `"id": null` names nothing. A method with it is still a request (a notification has
        // no `id` at all), and MCP forbids a `null` id.
        let null_id = self.id.as_ref().is_some_and(|id| id.get() == "null");
        let id = self.id.filter(|_| !null_id);
        if !self.jsonrpc_2_0 {
            return Err((
                id,
                super::errors::invalid_request("Invalid Request: jsonrpc must be \"2.0\""),
            ));
        }
        if self.method.is_some() && (null_id || id.as_ref().is_some_and(|id| !is_request_id(id))) {
            // Not echoed: the client could not tell its request by it.
            return Err((
                None,
                super::errors::invalid_request(
                    "Invalid Request: a request's id must be a string or an integer",
                ),
            ));
        }
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

/// Whether `id` may name a request: MCP allows a string or an integer (not `null`, a
/// fraction, a boolean, an array or an object). A number's text is as the client wrote it: an
/// integer has neither a point nor an exponent.
fn is_request_id(id: &RawValue) -> bool {
    let text = id.get().as_bytes();
    match text.first() {
        Some(b'"') => true,
        Some(b'-' | b'0'..=b'9') => text[1..].iter().all(u8::is_ascii_digit),
        _ => false,
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

/// `{"jsonrpc":"2.0","id":<id>,"result":<result>}` for a result already written: copied once
/// into a buffer of its size (a tool's answer is often larger than [`encode_result`]'s first
/// guess, which would grow it several times).
pub fn encode_raw_result(id: &RawValue, result: &RawValue) -> Bytes {
    // The envelope's own bytes (`{"jsonrpc":"2.0","id":`, `,"result":`, `}`) are 33.
    let mut buf = Vec::with_capacity(33 + id.get().len() + result.get().len());
    write_head(&mut buf, Some(id));
    buf.extend_from_slice(b",\"result\":");
    buf.extend_from_slice(result.get().as_bytes());
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
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    method_and_params(buf, method, params)
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}` for server-to-client requests.
pub fn encode_request<T: Serialize + ?Sized>(id: &str, method: &str, params: &T) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let _ = serde_json::to_writer(&mut buf, id);
    buf.push(b',');
    method_and_params(buf, method, params)
}

/// Ends a message begun in `buf` with `"method":<method>,"params":<params>}` (params that do
/// not serialise are sent as `{}`).
fn method_and_params<T: Serialize + ?Sized>(mut buf: Vec<u8>, method: &str, params: &T) -> Bytes {
    buf.extend_from_slice(b"\"method\":");
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

    /// `jsonrpc`, judged in place, means what the `String` it was read into meant: an escaped
    /// `"2.0"` is one, anything else a string is `-32600`, and a value that is no string fails the
    /// parse with the same words.
    #[test]
    fn the_version_is_judged_as_a_string_was() {
        assert!(matches!(
            parse(r#"{"jsonrpc":"2\u002e0","id":1,"method":"ping"}"#),
            Ok(Message::Request { .. })
        ));
        for version in [r#""2.00""#, r#""""#, "null"] {
            let text = format!(r#"{{"jsonrpc":{version},"id":1,"method":"ping"}}"#);
            let (_, err) = parse(&text).unwrap_err();
            assert_eq!(err.code.0, -32600, "{text}");
        }
        let absent = parse(r#"{"id":1,"method":"ping"}"#).unwrap_err();
        assert_eq!(absent.1.code.0, -32600);
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct AsString {
            jsonrpc: Option<String>,
        }
        for text in [
            r#"{"jsonrpc":2}"#,
            r#"{"jsonrpc":["2.0"]}"#,
            r#"{"jsonrpc":{}}"#,
        ] {
            let ours = serde_json::from_str::<Incoming>(text)
                .unwrap_err()
                .to_string();
            let string = serde_json::from_str::<AsString>(text)
                .unwrap_err()
                .to_string();
            assert_eq!(ours, string, "{text}");
        }
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
        let result = RawValue::from_string(r#"{"a":[1,"x"]}"#.into()).unwrap();
        let raw = encode_raw_result(&id, &result);
        assert_eq!(raw, encode_result(&id, &result));
        assert_eq!(raw.len(), 33 + id.get().len() + result.get().len());
        let out = encode_error(None, &crate::protocol::errors::parse_error("x"));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], -32700);
    }
}

/// Property tests: the envelope is parsed from untrusted bytes, so for any input it must not
/// panic and must end in exactly one of the documented outcomes.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use crate::testing::prop_config as config;

    /// Any JSON value without floats (serde_json's default float parser is not exact, and
    /// floats add nothing an integer does not here).
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A field that is absent, or one of a few plausible values, or anything at all.
    fn field(plausible: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            2 => Just(None),
            3 => prop::sample::select(plausible).prop_map(Some),
            2 => json_value().prop_map(Some),
        ]
    }

    /// Objects shaped like JSON-RPC messages, with every field possibly missing or mistyped.
    fn envelope() -> impl Strategy<Value = Value> {
        (
            field(vec![json!("2.0"), json!("1.0"), json!(2.0), Value::Null]),
            field(vec![
                json!(1),
                json!("a"),
                Value::Null,
                json!({"x": 1}),
                json!(-7),
                json!(1.5),
                json!(true),
                json!([1]),
            ]),
            field(vec![
                json!("ping"),
                json!("tools/call"),
                Value::Null,
                json!(5),
            ]),
            field(vec![json!({}), json!([]), Value::Null]),
            field(vec![json!({}), Value::Null]),
            field(vec![json!({"code": 1, "message": "m"}), Value::Null]),
            prop::collection::btree_map("[a-z]{1,4}", json_value(), 0..2),
        )
            .prop_map(|(jsonrpc, id, method, params, result, error, extra)| {
                let mut m: serde_json::Map<String, Value> = extra.into_iter().collect();
                for (k, v) in [
                    ("jsonrpc", jsonrpc),
                    ("id", id),
                    ("method", method),
                    ("params", params),
                    ("result", result),
                    ("error", error),
                ] {
                    match v {
                        Some(v) => m.insert(k.to_string(), v),
                        None => m.remove(k),
                    };
                }
                Value::Object(m)
            })
    }

    /// What the envelope is, computed from the JSON value independently of serde.
    #[derive(Debug, PartialEq)]
    enum Expected {
        /// Not an object, or `jsonrpc`/`method` not a string: a parse error (`-32700`).
        NotEnvelope,
        Request(Value, String),
        Notification(String),
        Response(Value, bool),
        /// `-32600`, naming the id when there is one.
        Invalid(Option<Value>),
    }

    fn expected(v: &Value) -> Expected {
        let Some(o) = v.as_object() else {
            return Expected::NotEnvelope;
        };
        // `Option<String>`: null and absent are `None`; any other non-string fails the parse.
        let string = |k: &str| match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(()),
        };
        // `Option<Box<RawValue>>`: null and absent are `None`.
        let raw = |k: &str| o.get(k).filter(|v| !v.is_null()).cloned();
        let (Ok(jsonrpc), Ok(method)) = (string("jsonrpc"), string("method")) else {
            return Expected::NotEnvelope;
        };
        let id = raw("id");
        if jsonrpc.as_deref() != Some("2.0") {
            return Expected::Invalid(id);
        }
        // MCP: a request's id is a string or an integer, never `null`.
        let request_id = |id: &Value| id.is_string() || id.is_i64() || id.is_u64();
        if method.is_some()
            && o.get("id")
                .is_some_and(|id| id.is_null() || !request_id(id))
        {
            return Expected::Invalid(None);
        }
        match (method, id) {
            (Some(m), Some(id)) => Expected::Request(id, m),
            (Some(m), None) => Expected::Notification(m),
            (None, Some(id)) => match (raw("result"), raw("error")) {
                (Some(_), None) => Expected::Response(id, true),
                (None, Some(_)) => Expected::Response(id, false),
                _ => Expected::Invalid(Some(id)),
            },
            (None, None) => Expected::Invalid(None),
        }
    }

    fn to_value(raw: &RawValue) -> Value {
        serde_json::from_str(raw.get()).expect("a RawValue is valid JSON")
    }

    /// What the parser and `classify` made of the text, in the model's terms.
    fn actual(text: &str) -> Expected {
        let Ok(incoming) = serde_json::from_str::<Incoming>(text) else {
            return Expected::NotEnvelope;
        };
        match incoming.classify() {
            Ok(Message::Request { id, method, .. }) => Expected::Request(to_value(&id), method),
            Ok(Message::Notification { method, .. }) => Expected::Notification(method),
            Ok(Message::Response { id, outcome }) => {
                Expected::Response(to_value(&id), outcome.is_ok())
            }
            Err((id, e)) => {
                assert_eq!(e.code.0, -32600, "classify only ever says Invalid Request");
                // The error answer names the request and is itself valid JSON-RPC.
                let answer: Value = serde_json::from_slice(&encode_error(id.as_deref(), &e))
                    .expect("an error answer is JSON");
                assert_eq!(answer["jsonrpc"], "2.0");
                assert_eq!(answer["error"]["code"], -32600);
                let id = id.as_deref().map(to_value);
                assert_eq!(answer["id"], id.clone().unwrap_or(Value::Null));
                Expected::Invalid(id)
            }
        }
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Any bytes at all: parsing and classifying never panic, and a classification error
        /// is always `-32600`.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(incoming) = serde_json::from_slice::<Incoming>(&bytes)
                && let Err((_, e)) = incoming.classify()
            {
                prop_assert_eq!(e.code.0, -32600);
            }
        }

        /// Every JSON value is classified exactly as the JSON-RPC rules (with MCP's request ids,
        /// and serde's treatment of `null` as absent elsewhere) say, ids read back unchanged.
        #[test]
        fn any_json_value_is_classified_by_the_rules(v in prop_oneof![json_value(), envelope()]) {
            prop_assert_eq!(actual(&v.to_string()), expected(&v));
        }

        /// A valid message cut short anywhere is not a message (the server's `-32700`).
        #[test]
        fn truncated_messages_do_not_parse(v in envelope(), cut in any::<prop::sample::Index>()) {
            let text = v.to_string();
            let end = cut.index(text.len());
            prop_assume!(text.is_char_boundary(end));
            prop_assert!(serde_json::from_str::<Incoming>(&text[..end]).is_err());
        }

        /// What this server sends parses back as the message it meant, ids byte for byte.
        #[test]
        fn encoded_messages_round_trip(
            id in ".{0,16}",
            method in ".{1,16}",
            params in json_value(),
            answer_id in prop_oneof![any::<i64>().prop_map(Value::from), ".{0,8}".prop_map(Value::String)],
            code in any::<i32>(),
            message in ".{0,16}",
        ) {
            match serde_json::from_slice::<Incoming>(&encode_request(&id, &method, &params)).map(Incoming::classify) {
                Ok(Ok(Message::Request { id: got, method: m, params: p })) => {
                    prop_assert_eq!(to_value(&got), Value::String(id));
                    prop_assert_eq!(m, method.clone());
                    // `null` params are read as absent, as for any message.
                    prop_assert_eq!(p.map(|p| to_value(&p)).unwrap_or(Value::Null), params.clone());
                }
                other => prop_assert!(false, "request did not round trip: {other:?}"),
            }
            match serde_json::from_slice::<Incoming>(&encode_notification(&method, &params)).map(Incoming::classify) {
                Ok(Ok(Message::Notification { method: m, .. })) => prop_assert_eq!(m, method),
                other => prop_assert!(false, "notification did not round trip: {other:?}"),
            }
            let raw_id = RawValue::from_string(answer_id.to_string()).expect("JSON");
            let ok: Value = serde_json::from_slice(&encode_result(&raw_id, &params)).expect("JSON");
            prop_assert_eq!(&ok["id"], &answer_id);
            prop_assert_eq!(&ok["result"], &params);
            let e = ErrorData::new(rmcp::model::ErrorCode(code), message.clone(), None);
            let err: Value = serde_json::from_slice(&encode_error(Some(&raw_id), &e)).expect("JSON");
            prop_assert_eq!(&err["id"], &answer_id);
            prop_assert_eq!(&err["error"]["code"], &json!(code));
            prop_assert_eq!(&err["error"]["message"], &json!(message));
        }
    }
}
