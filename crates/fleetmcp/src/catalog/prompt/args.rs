//! A prompt's arguments from a Rust type: what `prompts/list` shows (each property of the
//! type's JSON Schema: its name, its doc comment as the description, whether it is required),
//! and how `prompts/get` turns the strings MCP sends into that type.
//!
//! MCP prompt arguments are strings. A property whose schema is `integer`, `number` or
//! `boolean` (a Rust integer, float or `bool`, or an `Option` of one) is parsed from its
//! string first (`"42"` for a `u64`, `"true"` for a `bool`), so such a field is declared with
//! its real type; anything else (strings, enums of strings) is handed to serde as sent.

use std::collections::HashMap;

use rmcp::model::PromptArgument;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::PromptError;
use crate::catalog::tool::{NullForm, doc_description, generate};

/// A scalar JSON type an argument is parsed into from its string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
    Integer,
    Number,
    Boolean,
}

/// The arguments of one prompt (or the variables of one template).
pub(in crate::catalog) struct Arguments {
    /// As `prompts/list` shows them, by name.
    pub listed: Vec<PromptArgument>,
    /// The type's doc comment: the prompt's description when it was given none.
    pub description: Option<String>,
    /// The arguments parsed from their string before serde sees them.
    scalars: HashMap<String, Scalar>,
}

impl Arguments {
    /// The arguments of `A`: the properties of its schema (an `Option` field is an optional
    /// argument of its inner type, as for a tool's arguments).
    pub fn of<A: JsonSchema>() -> Self {
        let schema = generate::<A>(Some(NullForm::Omit));
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut listed = Vec::new();
        let mut scalars = HashMap::new();
        let properties = schema.get("properties").and_then(Value::as_object);
        for (name, property) in properties.into_iter().flatten() {
            let text = |key: &str| property.get(key).and_then(Value::as_str);
            let mut argument =
                PromptArgument::new(name).with_required(required.contains(&name.as_str()));
            if let Some(title) = text("title") {
                argument = argument.with_title(title);
            }
            if let Some(description) = text("description") {
                argument = argument.with_description(description);
            }
            listed.push(argument);
            let scalar = match text("type") {
                Some("integer") => Scalar::Integer,
                Some("number") => Scalar::Number,
                Some("boolean") => Scalar::Boolean,
                _ => continue,
            };
            scalars.insert(name.clone(), scalar);
        }
        let description = doc_description(&schema);
        Self {
            listed,
            description,
            scalars,
        }
    }

    /// `given` as an `A`, or why not (invalid params): a required argument missing, a scalar
    /// that does not parse, or what serde refuses.
    pub fn parse<A: DeserializeOwned>(
        &self,
        prompt: &str,
        given: HashMap<String, String>,
    ) -> Result<A, PromptError> {
        for a in &self.listed {
            if a.required == Some(true) && !given.contains_key(&a.name) {
                return Err(PromptError::InvalidArguments(format!(
                    "Missing required argument `{}` for prompt {prompt}",
                    a.name
                )));
            }
        }
        let mut object = Map::new();
        for (name, text) in given {
            let value = match self.scalars.get(&name) {
                Some(&scalar) => parse_scalar(scalar, &text).ok_or_else(|| {
                    PromptError::InvalidArguments(format!(
                        "Invalid argument `{name}` for prompt {prompt}: expected {}, got {text:?}",
                        match scalar {
                            Scalar::Integer => "an integer",
                            Scalar::Number => "a number",
                            Scalar::Boolean => "`true` or `false`",
                        }
                    ))
                })?,
                None => Value::String(text),
            };
            object.insert(name, value);
        }
        serde_json::from_value(Value::Object(object)).map_err(|e| {
            PromptError::InvalidArguments(format!("Invalid arguments for prompt {prompt}: {e}"))
        })
    }
}

fn parse_scalar(scalar: Scalar, text: &str) -> Option<Value> {
    let text = text.trim();
    match scalar {
        // Through `Number`'s own parser, so a `u64` above `i64::MAX` stays exact; a fraction or
        // an exponent is not an integer.
        Scalar::Integer => text
            .parse::<serde_json::Number>()
            .ok()
            .filter(|n| n.is_i64() || n.is_u64())
            .map(Value::Number),
        Scalar::Number => text.parse::<serde_json::Number>().ok().map(Value::Number),
        Scalar::Boolean => text.parse::<bool>().ok().map(Value::Bool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments of a prompt, with a field of each kind.
    #[derive(serde::Deserialize, JsonSchema, Debug, PartialEq)]
    struct Triage {
        /// The ticket to triage.
        ticket_id: u64,
        /// How sure the model must be, from 0 to 1.
        confidence: Option<f64>,
        urgent: Option<bool>,
        /// Who asks.
        #[serde(default)]
        asked_by: String,
    }

    fn given(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn listed_from_the_type_with_doc_comments_and_required() {
        let args = Arguments::of::<Triage>();
        let listed: Vec<(&str, Option<&str>, Option<bool>)> = args
            .listed
            .iter()
            .map(|a| (a.name.as_str(), a.description.as_deref(), a.required))
            .collect();
        assert_eq!(
            listed,
            [
                ("asked_by", Some("Who asks."), Some(false)),
                (
                    "confidence",
                    Some("How sure the model must be, from 0 to 1."),
                    Some(false)
                ),
                ("ticket_id", Some("The ticket to triage."), Some(true)),
                ("urgent", None, Some(false)),
            ]
        );
    }

    #[test]
    fn scalars_are_parsed_from_their_strings() {
        let args = Arguments::of::<Triage>();
        let parsed: Triage = args
            .parse(
                "triage",
                given(&[
                    ("ticket_id", "42"),
                    ("confidence", "0.5"),
                    ("urgent", "true"),
                ]),
            )
            .unwrap();
        let expected = Triage {
            ticket_id: 42,
            confidence: Some(0.5),
            urgent: Some(true),
            asked_by: String::new(),
        };
        assert_eq!(parsed, expected);
        let big: Triage = args
            .parse("triage", given(&[("ticket_id", &u64::MAX.to_string())]))
            .unwrap();
        assert_eq!(big.ticket_id, u64::MAX);
    }

    #[test]
    fn bad_arguments_are_refused_naming_them() {
        let args = Arguments::of::<Triage>();
        let refused = |pairs: &[(&str, &str)]| match args.parse::<Triage>("triage", given(pairs)) {
            Err(PromptError::InvalidArguments(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            refused(&[]),
            "Missing required argument `ticket_id` for prompt triage"
        );
        assert_eq!(
            refused(&[("ticket_id", "abc")]),
            "Invalid argument `ticket_id` for prompt triage: expected an integer, got \"abc\""
        );
        assert_eq!(
            refused(&[("ticket_id", "4.5")]),
            "Invalid argument `ticket_id` for prompt triage: expected an integer, got \"4.5\""
        );
        assert_eq!(
            refused(&[("ticket_id", "1"), ("urgent", "yes")]),
            "Invalid argument `urgent` for prompt triage: expected `true` or `false`, got \"yes\""
        );
        // What only serde knows: a negative id for a `u64`.
        let m = refused(&[("ticket_id", "-1")]);
        assert!(
            m.starts_with("Invalid arguments for prompt triage: "),
            "{m}"
        );
    }
}
