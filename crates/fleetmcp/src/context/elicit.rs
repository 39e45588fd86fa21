//! Typed elicitation: [`RequestContext::elicit_form`] asks the user to fill in a form made from
//! a Rust type and gives back a value of it, [`RequestContext::confirm`] asks a yes or no.
//!
//! The specification restricts a form (`requestedSchema`) to a flat object whose properties
//! are each a string (`minLength`, `maxLength`, `format` of `email`, `uri`, `date` or
//! `date-time`), a number or integer (`minimum`, `maximum`), a boolean, an enum of strings
//! (`enum`, or `oneOf` of `const` and `title`), or (2025-11-25) a list of such an enum; each
//! with a `title`, `description` and `default`. The type's schema is made to that shape here,
//! or refused with [`ClientRequestError::InvalidForm`] naming what does not fit.

use rmcp::model::{ElicitResult, ElicitationAction, JsonObject};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ClientRequestError, RequestContext};
use crate::protocol::errors;

/// What the user did with a form asked with [`RequestContext::elicit_form`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elicited<T> {
    /// The user filled in the form and sent it (`accept`).
    Accepted(T),
    /// The user said no (`decline`): the call goes on without the answer.
    Declined,
    /// The user dismissed the question without choosing (`cancel`).
    Cancelled,
}

impl<T> Elicited<T> {
    /// The answer, if the user sent one.
    pub fn accepted(self) -> Option<T> {
        match self {
            Self::Accepted(v) => Some(v),
            Self::Declined | Self::Cancelled => None,
        }
    }
}

impl RequestContext {
    /// `elicitation/create` in form mode, typed: asks the user, through the client, to fill in
    /// a form made from `T` (its fields are the form's, a field's doc comment its description,
    /// an `Option` field optional), and gives back what they did, with the answer as a `T`.
    ///
    /// `T` must be a struct whose fields are strings, numbers, booleans, enums of unit
    /// variants or lists of such enums (the specification's restricted form); any other is
    /// refused with [`ClientRequestError::InvalidForm`] before anything is sent, and an answer
    /// that is not a `T` is [`ClientRequestError::InvalidInput`]. `?` turns every error into
    /// the handler's.
    ///
    /// - A client that did not declare the `elicitation` capability is not asked: the call
    ///   fails with [`ClientRequestError::NotSupported`] (a result with `isError: true`), or in
    ///   2026-07-28 with [`ClientRequestError::MissingCapability`] (`-32021`).
    /// - In the session era the handler waits for the answer at most 300 s
    ///   ([`ClientRequestError::Timeout`]); a background task waits in `input_required` until
    ///   the client answers with `tasks/update` or cancels.
    /// - In 2026-07-28 the server sends no request: the first run ends at this call's `?` with
    ///   an `InputRequiredResult` holding the question, and when the client retries with the
    ///   answer, the handler runs again from the top and this call returns it. Whatever the
    ///   handler did before the question it does again: take effects after the last answer
    ///   (see [`RequestContext::call_key`]).
    ///
    /// ```
    /// use fleetmcp::{Elicited, NoArgs, tool};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Contact {
    ///     /// Where to send the receipt.
    ///     email: String,
    ///     /// Also subscribe to the newsletter.
    ///     newsletter: Option<bool>,
    /// }
    ///
    /// let checkout = tool("checkout").handler(|_: NoArgs, ctx| async move {
    ///     Ok(match ctx.elicit_form::<Contact>("Where should the receipt go?").await? {
    ///         Elicited::Accepted(c) => format!("receipt sent to {}", c.email),
    ///         Elicited::Declined | Elicited::Cancelled => "no receipt".to_string(),
    ///     })
    /// });
    /// # drop(checkout);
    /// ```
    pub async fn elicit_form<T: JsonSchema + DeserializeOwned>(
        &self,
        message: impl Into<String>,
    ) -> Result<Elicited<T>, ClientRequestError> {
        let schema = form_schema::<T>().map_err(ClientRequestError::InvalidForm)?;
        let answer = self.elicit_schema(message.into(), schema).await?;
        Ok(match answer.action {
            ElicitationAction::Accept => {
                let content = answer.content.unwrap_or_else(|| json!({}));
                let value = serde_json::from_value(content).map_err(|e| {
                    ClientRequestError::InvalidInput(errors::invalid_params(format!(
                        "Invalid params: the client's answer does not fill in the form: {e}"
                    )))
                })?;
                Elicited::Accepted(value)
            }
            ElicitationAction::Decline => Elicited::Declined,
            // `Cancel`, and any action a later rmcp adds: not an answer.
            _ => Elicited::Cancelled,
        })
    }

    /// Asks the user, through the client, to confirm `message`: an empty form, `true` when
    /// they accept it, `false` when they decline or cancel. It needs what
    /// [`RequestContext::elicit_form`] needs, fails as it does, waits as long, and in
    /// 2026-07-28 likewise runs the handler again with the answer.
    ///
    /// ```
    /// use fleetmcp::{NoArgs, tool};
    ///
    /// let purge = tool("purge").handler(|_: NoArgs, ctx| async move {
    ///     if !ctx.confirm("Delete every note?").await? {
    ///         return Ok("kept");
    ///     }
    ///     // ... delete them ...
    ///     Ok("deleted")
    /// });
    /// # drop(purge);
    /// ```
    pub async fn confirm(&self, message: impl Into<String>) -> Result<bool, ClientRequestError> {
        let mut empty = JsonObject::new();
        empty.insert("type".into(), json!("object"));
        empty.insert("properties".into(), json!({}));
        let answer = self.elicit_schema(message.into(), empty).await?;
        Ok(answer.action == ElicitationAction::Accept)
    }

    /// Asks a form-mode question with this `requestedSchema`.
    async fn elicit_schema(
        &self,
        message: String,
        schema: JsonObject,
    ) -> Result<ElicitResult, ClientRequestError> {
        let key = self.auto_key("elicitation");
        let params = json!({"message": message, "requestedSchema": schema});
        self.ask_typed(&key, "elicitation/create", &params).await
    }
}

/// The `requestedSchema` of a form made from `T`, or why `T` cannot be one.
pub(crate) fn form_schema<T: JsonSchema>() -> Result<JsonObject, String> {
    let name = std::any::type_name::<T>();
    let schema = crate::protocol::schema::generate_inlined::<T>();
    let refuse = |why: String| {
        format!(
            "`{name}` cannot be an elicitation form: {why}; a form is a struct whose fields are \
             strings, numbers, booleans, enums of unit variants or lists of such enums"
        )
    };
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
    let combined = ["oneOf", "anyOf", "allOf", "additionalProperties"]
        .into_iter()
        .find(|k| schema.get(*k).is_some_and(|v| v != &Value::Bool(false)));
    if !is_object || combined.is_some() {
        return Err(refuse("it is not a struct of named fields".into()));
    }
    let mut properties = JsonObject::new();
    if let Some(Value::Object(fields)) = schema.get("properties") {
        for (field, def) in fields {
            let primitive =
                primitive(def).map_err(|what| refuse(format!("`{field}` is {what}")))?;
            properties.insert(field.clone(), Value::Object(primitive));
        }
    }
    let mut form = JsonObject::new();
    form.insert("type".into(), json!("object"));
    form.insert("properties".into(), Value::Object(properties));
    if let Some(required) = schema.get("required") {
        form.insert("required".into(), required.clone());
    }
    Ok(form)
}

/// Keywords every kind of property may have.
const ANNOTATIONS: &[&str] = &["title", "description", "default"];

/// `def` as one of the specification's primitive schemas (with only its keywords: a
/// `pattern`, say, is left out, as the answer is checked by deserialising it), or what it is.
fn primitive(def: &Value) -> Result<JsonObject, String> {
    let Value::Object(def) = def else {
        return Err("a schema that accepts anything or nothing".into());
    };
    let ty = def.get("type").and_then(Value::as_str);
    let (ty, keep): (&str, &[&str]) = match ty {
        Some("string") if def.contains_key("enum") => ("string", &["enum"]),
        Some("string") | None if def.contains_key("oneOf") => {
            return titled_choices(def).ok_or_else(|| "an enum with data".to_string());
        }
        Some("string") => ("string", &["minLength", "maxLength", "format"]),
        Some(t @ ("number" | "integer")) => (t, &["minimum", "maximum"]),
        Some("boolean") => ("boolean", &[]),
        Some("array") => {
            return multi_select(def).ok_or_else(|| "a list of other than an enum".into());
        }
        Some("object") => return Err("a struct or map (a form is flat)".into()),
        _ => return Err("not a string, number, boolean or enum".into()),
    };
    let mut out = JsonObject::new();
    out.insert("type".into(), json!(ty));
    for k in ANNOTATIONS.iter().chain(keep) {
        if let Some(v) = def.get(*k) {
            out.insert((*k).into(), v.clone());
        }
    }
    // Only the formats a form knows; another (`uuid`, say) is left out rather than sent.
    if out
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !["email", "uri", "date", "date-time"].contains(&f))
    {
        out.remove("format");
    }
    if let Some(Value::Array(values)) = out.get("enum")
        && !values.iter().all(Value::is_string)
    {
        return Err("an enum whose values are not all strings".into());
    }
    Ok(out)
}

/// An enum whose variants have doc comments (`"oneOf": [{"const": "a", "description": ..}]`)
/// as a titled single choice: each `const` with its doc comment as its `title`.
fn titled_choices(def: &JsonObject) -> Option<JsonObject> {
    let choices = choices(def.get("oneOf")?)?;
    let mut out = JsonObject::new();
    out.insert("type".into(), json!("string"));
    for k in ANNOTATIONS {
        if let Some(v) = def.get(*k) {
            out.insert((*k).into(), v.clone());
        }
    }
    out.insert("oneOf".into(), Value::Array(choices));
    Some(out)
}

/// `[{"const": .., "title": ..}]` from alternatives that are each one string (`const`, or an
/// `enum` of one); the title is the alternative's own, else its description, else the value.
fn choices(alternatives: &Value) -> Option<Vec<Value>> {
    alternatives
        .as_array()?
        .iter()
        .map(|alt| {
            let value = match alt.get("const") {
                Some(v) => v.as_str()?,
                None => match alt.get("enum")?.as_array()?.as_slice() {
                    [one] => one.as_str()?,
                    _ => return None,
                },
            };
            let title = alt
                .get("title")
                .or_else(|| alt.get("description"))
                .and_then(Value::as_str)
                .unwrap_or(value);
            Some(json!({"const": value, "title": title}))
        })
        .collect()
}

/// A list of an enum of strings, as a multiple choice (2025-11-25).
fn multi_select(def: &JsonObject) -> Option<JsonObject> {
    let items = def.get("items")?.as_object()?;
    let items = match (items.get("enum"), items.get("oneOf")) {
        (Some(Value::Array(values)), _) if values.iter().all(Value::is_string) => {
            json!({"type": "string", "enum": values})
        }
        (None, Some(alternatives)) => json!({"anyOf": choices(alternatives)?}),
        _ => return None,
    };
    let mut out = JsonObject::new();
    out.insert("type".into(), json!("array"));
    for k in ANNOTATIONS.iter().chain(&["minItems", "maxItems"]) {
        if let Some(v) = def.get(*k) {
            out.insert((*k).into(), v.clone());
        }
    }
    out.insert("items".into(), items);
    Some(out)
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde_json::{Value, json};

    use super::form_schema;

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(rename_all = "lowercase")]
    enum Priority {
        Low,
        High,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(rename_all = "lowercase")]
    enum Team {
        /// The printer people
        Hardware,
        /// Everyone else
        Software,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Ticket {
        /// What is wrong.
        title: String,
        id: u32,
        urgent: bool,
        priority: Option<Priority>,
        team: Team,
        labels: Vec<Priority>,
        email: Option<String>,
    }

    #[test]
    fn a_struct_of_primitives_is_a_flat_form_in_the_specifications_shape() {
        let form = Value::Object(form_schema::<Ticket>().unwrap());
        assert_eq!(form["type"], "object");
        assert!(form.get("$schema").is_none() && form.get("$defs").is_none());
        assert_eq!(
            form["required"],
            json!(["title", "id", "urgent", "team", "labels"])
        );
        let p = &form["properties"];
        assert_eq!(
            p["title"],
            json!({"type": "string", "description": "What is wrong."})
        );
        assert_eq!(p["id"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(p["urgent"], json!({"type": "boolean"}));
        assert_eq!(
            p["priority"],
            json!({"type": "string", "enum": ["low", "high"]})
        );
        assert_eq!(
            p["team"],
            json!({"type": "string", "oneOf": [
                {"const": "hardware", "title": "The printer people"},
                {"const": "software", "title": "Everyone else"}]})
        );
        assert_eq!(
            p["labels"],
            json!({"type": "array", "items": {"type": "string", "enum": ["low", "high"]}})
        );
        assert_eq!(p["email"], json!({"type": "string"}));
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Address {
        street: String,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        name: String,
        address: Address,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Listed {
        names: Vec<String>,
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum WithData {
        A { x: u32 },
        B(String),
    }

    #[test]
    fn a_type_that_cannot_be_a_flat_form_is_refused_naming_why() {
        let e = form_schema::<Nested>().unwrap_err();
        assert!(e.contains("`address` is a struct or map"), "{e}");
        assert!(e.contains("Nested"), "{e}");
        let e = form_schema::<Listed>().unwrap_err();
        assert!(e.contains("`names` is a list"), "{e}");
        for e in [
            form_schema::<String>().unwrap_err(),
            form_schema::<Vec<Address>>().unwrap_err(),
            form_schema::<WithData>().unwrap_err(),
            form_schema::<std::collections::HashMap<String, String>>().unwrap_err(),
        ] {
            assert!(e.contains("not a struct of named fields"), "{e}");
        }
    }
}
