//! Schemas from Rust types: the JSON Schema (2020-12) schemars derives, made fit to publish.
//! Arguments are published without type arrays and without the `null` of an optional field
//! (and validated against that same schema), results with that `null` as `anyOf`, and neither
//! with the `format`s of Rust number types.
//!
//! Here, below `catalog` and `context`, because both make them: a tool's argument and result
//! schemas (`catalog/tool`) and an elicitation form's (`context/elicit.rs`). The tests of what
//! tools publish are in `catalog/tool/schema.rs`.

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Value, json};

/// How the published schemas show the `null` that schemars adds for `Option<T>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NullForm {
    /// Arguments: an optional property is simply left out of `required`, with the inner
    /// schema alone. Clients never need to send `null`, and the single-type schema dialects of
    /// several model providers reject `"type": [.., "null"]`.
    Omit,
    /// Results: serde writes `None` as `null`, so the schema must keep allowing it or clients
    /// that check `structuredContent` reject the result; it is spelled `anyOf` instead of a
    /// type array.
    AnyOf,
}

/// The schema of `T`, with `null` rewritten as `form` says (`None`: as schemars writes it).
pub(crate) fn generate<T: JsonSchema>(form: Option<NullForm>) -> JsonObject {
    generate_with::<T>(schemars::generate::SchemaSettings::draft2020_12(), form)
}

/// [`generate`] with every subschema written in place (no `$defs`, no `$ref`), as an
/// elicitation form must be (`context/elicit.rs`): a flat object whose properties are schemas
/// of their own.
pub(crate) fn generate_inlined<T: JsonSchema>() -> JsonObject {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    generate_with::<T>(settings, Some(NullForm::Omit))
}

fn generate_with<T: JsonSchema>(
    settings: schemars::generate::SchemaSettings,
    form: Option<NullForm>,
) -> JsonObject {
    let mut schema = settings.into_generator().into_root_schema_for::<T>();
    if let Some(form) = form {
        schemars::transform::Transform::transform(&mut NoTypeArrays(form), &mut schema);
    }
    match schema.to_value() {
        Value::Object(mut map) => {
            strip_rust_formats(&mut map);
            map
        }
        // A result's `true`/`false` (a type accepting anything or nothing, such as
        // `serde_json::Value`): the same as a schema, for `wrap_non_object` to wrap.
        Value::Bool(any) if form == Some(NullForm::AnyOf) => {
            let mut m = JsonObject::new();
            if !any {
                m.insert("not".into(), json!({}));
            }
            m
        }
        // An argument type's `true`/`false`: publish it as an open object, which is what MCP
        // requires of an input schema's root.
        _ => {
            let mut m = JsonObject::new();
            m.insert("type".into(), Value::String("object".into()));
            m
        }
    }
}

/// The key under which a structured value that is not an object is sent (see
/// [`wrap_non_object`]).
pub(crate) const RESULT_KEY: &str = "result";

/// Makes an output schema one MCP accepts. Up to 2025-11-25 an `outputSchema` must be
/// `"type": "object"` at its root and `structuredContent` an object (2026-07-28 allows any
/// value, but one tool publishes one schema to every era): a schema that is not (an array, a
/// string, a number, an enum, an `Option`, any value) becomes the schema of an object holding
/// the value, required, under [`RESULT_KEY`]; its `$schema` and `$defs` move to the new root, so
/// the `$ref`s inside still resolve. Returns whether it did: the tool's values must then be
/// wrapped the same way (`ToolOutput::wrapped`, `catalog/tool/result.rs`).
pub(crate) fn wrap_non_object(schema: &mut JsonObject) -> bool {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        return false;
    }
    let mut inner = std::mem::take(schema);
    for key in ["$schema", "$defs"] {
        if let Some(v) = inner.remove(key) {
            schema.insert(key.into(), v);
        }
    }
    schema.insert("type".into(), json!("object"));
    schema.insert(
        "properties".into(),
        json!({ RESULT_KEY: Value::Object(inner) }),
    );
    schema.insert("required".into(), json!([RESULT_KEY]));
    true
}

/// Removes `"type": [..]` arrays from a schema and its subschemas (`$defs` included), and
/// with [`NullForm::Omit`] the `null` alternative schemars adds for `Option<T>`. A schema
/// that allows nothing but `null` (the unit type) is left alone.
#[derive(Debug, Clone)]
struct NoTypeArrays(NullForm);

impl schemars::transform::Transform for NoTypeArrays {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        schemars::transform::transform_subschemas(self, schema);
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        if self.0 == NullForm::Omit {
            drop_null_alternative(obj);
        }
        split_type_array(obj);
    }
}

/// Whether `v` is the schema schemars writes for `null` (`{"type": "null"}`).
fn is_null_schema(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.len() == 1 && o.get("type").and_then(Value::as_str) == Some("null"))
}

/// Keywords that only annotate a schema; when an `anyOf` of one schema is folded into its
/// parent, the parent's (a field's doc comment, say) win over the inner schema's.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Takes `null` out of what `allow_null` in schemars produces: `"type": [T, "null"]` (with
/// `null` in `enum`), or `"anyOf": [S, {"type": "null"}]` for a `$ref` or composite `S`.
fn drop_null_alternative(obj: &mut JsonObject) {
    if let Some(Value::Array(types)) = obj.get_mut("type")
        && types.len() > 1
        && types.iter().any(|t| t == "null")
    {
        types.retain(|t| t != "null");
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
    }
    let Some(Value::Array(alternatives)) = obj.get_mut("anyOf") else {
        return;
    };
    if alternatives.len() < 2
        || !alternatives.iter().any(is_null_schema)
        || alternatives.iter().all(is_null_schema)
    {
        return;
    }
    alternatives.retain(|v| !is_null_schema(v));
    if alternatives.len() != 1 {
        return;
    }
    // One schema left: fold it into the parent, unless they disagree on a keyword that is
    // more than an annotation (then `"anyOf": [S]` stays, which means the same).
    let clash = match obj.get("anyOf").and_then(|a| a.get(0)) {
        Some(Value::Object(inner)) => inner
            .keys()
            .any(|k| obj.contains_key(k) && !ANNOTATIONS.contains(&k.as_str())),
        _ => true,
    };
    if clash {
        return;
    }
    let Some(Value::Array(mut alternatives)) = obj.remove("anyOf") else {
        return;
    };
    if let Some(Value::Object(inner)) = alternatives.pop() {
        for (k, v) in inner {
            obj.entry(k).or_insert(v);
        }
    }
}

/// `"type": [A]` becomes `"type": A`, and `"type": [A, B, ..]` an `anyOf` of one type each
/// (the other keywords stay beside it: each applies only to instances of its own type).
fn split_type_array(obj: &mut JsonObject) {
    let Some(Value::Array(types)) = obj.get("type") else {
        return;
    };
    if types.len() == 1 {
        let only = types[0].clone();
        obj.insert("type".into(), only);
        return;
    }
    let Some(Value::Array(types)) = obj.remove("type") else {
        return;
    };
    let one_each: Vec<Value> = types.into_iter().map(|t| json!({ "type": t })).collect();
    if obj.contains_key("anyOf") {
        // Already an `anyOf` here: both must hold, so the new one goes under `allOf`.
        let all_of = obj
            .entry("allOf")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(all_of) = all_of {
            all_of.push(json!({ "anyOf": one_each }));
        }
    } else {
        obj.insert("anyOf".into(), Value::Array(one_each));
    }
}

/// Removes the `format` values schemars derives from Rust number types (`uint64`, `int32`,
/// `double`, ...). They are not JSON Schema formats, so validators in clients warn about them
/// on every call; `minimum` and `type: integer` already carry what matters.
fn strip_rust_formats(map: &mut JsonObject) {
    const RUST_FORMATS: &[&str] = &[
        "uint", "uint8", "uint16", "uint32", "uint64", "uint128", "int", "int8", "int16", "int32",
        "int64", "int128", "float", "double",
    ];
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| RUST_FORMATS.contains(&f))
    {
        map.remove("format");
    }
    for v in map.values_mut() {
        match v {
            Value::Object(m) => strip_rust_formats(m),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(m) = item {
                        strip_rust_formats(m);
                    }
                }
            }
            _ => {}
        }
    }
}
