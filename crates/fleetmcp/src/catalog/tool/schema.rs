//! Schemas from Rust types: the JSON Schema (2020-12) schemars derives, made fit to publish.
//! Arguments are published without type arrays and without the `null` of an optional field
//! (and validated against that same schema), results with that `null` as `anyOf`, and neither
//! with the `format`s of Rust number types.
//! Made in `protocol/schema.rs` (which `context`'s elicitation forms use too); what tools
//! publish is tested here.

pub(in crate::catalog) use crate::protocol::schema::{
    NullForm, RESULT_KEY, generate, wrap_non_object,
};

use rmcp::model::JsonObject;
use serde_json::Value;

/// The doc comment of the type `schema` was generated from (schemars writes it as the root's
/// `description`): what describes a tool or a prompt declared without `.description(..)`.
/// [`NoArgs`](crate::NoArgs) has none in its schema, so a tool without arguments is not
/// described by the library's words.
pub(in crate::catalog) fn doc_description(schema: &JsonObject) -> Option<String> {
    let text = schema.get("description").and_then(Value::as_str)?.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde_json::{Value, json};

    use crate::catalog::tool;

    /// Field names are chosen to show each shape schemars gives an `Option`.
    #[derive(serde::Deserialize, serde::Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Search {
        /// What to look for.
        query: String,
        /// Only tickets with this label.
        label: Option<String>,
        limit: Option<u32>,
        /// Only tickets in this state.
        state: Option<State>,
        tags: Option<Vec<String>>,
    }

    #[derive(serde::Deserialize, serde::Serialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(rename_all = "lowercase")]
    enum State {
        Open,
        Closed,
    }

    /// Every `"type"` in `v` whose value is an array, by JSON pointer.
    fn type_arrays(v: &Value, at: &str, found: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    if k == "type" && child.is_array() {
                        found.push(at.to_string());
                    }
                    type_arrays(child, &format!("{at}/{k}"), found);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    type_arrays(child, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn optional_fields_are_published_without_type_arrays() {
        // Returned as the result too: its output schema is the one of `Search`.
        let t = tool("search").handler(|a: Search, _ctx| async { Ok(crate::Structured(a)) });
        let input = Value::Object((*t.descriptor().input_schema).clone());
        let mut found = Vec::new();
        type_arrays(&input, "", &mut found);
        assert!(found.is_empty(), "type arrays at {found:?} in {input:#}");
        assert_eq!(input["required"], json!(["query"]));
        let props = &input["properties"];
        assert_eq!(
            props["label"],
            json!({"type": "string", "description": "Only tickets with this label."})
        );
        assert_eq!(props["limit"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(
            props["state"],
            json!({"$ref": "#/$defs/State", "description": "Only tickets in this state."})
        );
        assert_eq!(
            props["tags"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert!(!input.to_string().contains("null"), "{input:#}");

        // The output schema keeps `null` (serde writes `None` as `null`), as `anyOf`.
        let output = Value::Object((*t.descriptor().output_schema.clone().unwrap()).clone());
        let mut found = Vec::new();
        type_arrays(&output, "", &mut found);
        assert!(found.is_empty(), "type arrays at {found:?} in {output:#}");
        assert_eq!(
            output["properties"]["limit"],
            json!({"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 0})
        );
        let sent = serde_json::to_value(Search {
            query: "printer".into(),
            label: None,
            limit: None,
            state: None,
            tags: None,
        })
        .unwrap();
        let validator = jsonschema::validator_for(&output).unwrap();
        assert!(validator.is_valid(&sent), "{sent} against {output:#}");
    }

    /// Arguments meet the published schema, which leaves `null` out of an optional field
    /// (issue 38): an optional field is simply omitted, never `null`, and a required one is
    /// still required.
    #[test]
    fn optional_fields_are_omitted_not_null_and_required_ones_are_still_required() {
        let t = tool("search").handler(|_: Search, _ctx| async { Ok("ok") });
        assert!(t.validate(&json!({"query": "printer"})).is_ok());
        let nulls =
            json!({"query": "printer", "label": null, "limit": null, "state": null, "tags": null});
        let e = t.validate(&nulls).unwrap_err();
        let fields: Vec<&str> = e.data.as_ref().unwrap()["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap())
            .collect();
        for field in ["label", "limit", "state", "tags"] {
            assert!(fields.contains(&field), "{field}: {e:?}");
        }
        assert!(!e.message.contains("anyOf"), "{}", e.message);
        let e = t.validate(&json!({"label": null})).unwrap_err();
        assert_eq!(e.code.0, -32602);
        assert!(e.message.contains("query"), "{}", e.message);
        assert_eq!(e.data.unwrap()["errors"][0]["field"], "query");
        let e = t
            .validate(&json!({"query": "printer", "limit": "ten"}))
            .unwrap_err();
        assert!(e.message.contains("limit"), "{}", e.message);
    }

    #[derive(serde::Serialize, JsonSchema)]
    struct Note {
        id: u64,
        tags: Vec<State>,
    }

    /// The output schema a handler returning `Structured<T>` publishes.
    fn output_of<T: serde::Serialize + JsonSchema + Send + 'static>() -> Value {
        let t = tool("t").handler(|_: tool::NoArgs, _ctx| async {
            Err::<crate::Structured<T>, _>(tool::ToolError::failed("unused"))
        });
        Value::Object((*t.descriptor().output_schema.clone().unwrap()).clone())
    }

    /// MCP (up to 2025-11-25) wants an output schema whose root is an object and an object as
    /// `structuredContent` (issue 41: `Structured(Vec<Note>)` published `"type": "array"`):
    /// every other type is published, and sent, under `result` of an object.
    #[test]
    fn a_result_that_is_not_an_object_is_published_inside_one() {
        let note = || Note {
            id: 1,
            tags: vec![State::Open],
        };
        let cases: Vec<(Value, Value)> = vec![
            (
                output_of::<Vec<Note>>(),
                serde_json::to_value(vec![note()]).unwrap(),
            ),
            (output_of::<String>(), json!("text")),
            (output_of::<f64>(), json!(1.5)),
            (output_of::<u32>(), json!(7)),
            (output_of::<State>(), json!("closed")),
            (output_of::<Option<Note>>(), Value::Null),
            (
                output_of::<Option<Note>>(),
                serde_json::to_value(note()).unwrap(),
            ),
            (output_of::<Value>(), json!([1, "two"])),
        ];
        for (schema, value) in cases {
            assert_eq!(schema["type"], "object", "{schema:#}");
            assert_eq!(schema["required"], json!(["result"]), "{schema:#}");
            assert_eq!(
                schema["$schema"],
                "https://json-schema.org/draft/2020-12/schema"
            );
            assert!(schema["properties"]["result"].get("$schema").is_none());
            let validator = jsonschema::validator_for(&schema).unwrap();
            let sent = json!({ "result": value });
            assert!(validator.is_valid(&sent), "{sent} against {schema:#}");
            assert!(
                !validator.is_valid(&value),
                "{value} bare against {schema:#}"
            );
        }
        // `$ref`s inside still resolve: `$defs` moved to the new root.
        let list = output_of::<Vec<Note>>();
        assert!(list["$defs"].get("Note").is_some(), "{list:#}");
        assert_eq!(list["properties"]["result"]["type"], "array");
        let bad = json!({"result": [{"id": 1, "tags": ["lost"]}]});
        assert!(!jsonschema::validator_for(&list).unwrap().is_valid(&bad));
        // An object stays as it is.
        let obj = output_of::<Note>();
        assert_eq!(obj["required"], json!(["id", "tags"]), "{obj:#}");
        assert!(obj["properties"].get("result").is_none());
        let map = output_of::<serde_json::Map<String, Value>>();
        assert_eq!(map["type"], "object");
        assert!(map.get("required").is_none(), "{map:#}");
    }
}
