//! Which OAuth scope a request needs: the one its tool, resource (or template) or prompt
//! declares. Read from the method and its params alone, before anything runs, so the
//! transport can refuse it with `403` and no handler starts.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::app::App;
use crate::catalog::Catalog;

/// The scope a request needs: what its tool, resource or prompt declares, or, when the server
/// is a gateway, what its upstream's configuration says ([`crate::Upstream::required_scope`]).
pub(crate) fn scope_for(app: &App, method: &str, params: Option<&RawValue>) -> Option<String> {
    let Some(upstream) = app.upstream() else {
        return required_scope(&app.catalog(), method, params);
    };
    let t = target(method, params)?;
    upstream.required_scope(method, &t.name.or(t.uri)?)
}

/// What a request that can need a scope names: the tool or prompt (`name`) or the resource
/// (`uri`, a template's for a completion); `None` for every other method.
/// Borrowed from the params unless they hold an escape.
#[derive(Deserialize)]
struct Target<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uri: Option<Cow<'a, str>>,
}

/// `completion/complete`'s params: its `ref` names the prompt or the resource template whose
/// argument is completed, which needs that one's scope (a completer may list what only its
/// scope may read).
#[derive(Deserialize)]
struct Completing<'a> {
    #[serde(borrow, rename = "ref")]
    reference: Target<'a>,
}

fn target<'a>(method: &str, params: Option<&'a RawValue>) -> Option<Target<'a>> {
    match method {
        "tools/call" | "resources/read" | "resources/subscribe" | "prompts/get" => {
            serde_json::from_str(params?.get()).ok()
        }
        "completion/complete" => serde_json::from_str::<Completing>(params?.get())
            .ok()
            .map(|c| c.reference),
        _ => None,
    }
}

/// The scope `method` with `params` needs, if its target declares one. Unknown targets need
/// none here: dispatch answers them as usual.
fn required_scope(catalog: &Catalog, method: &str, params: Option<&RawValue>) -> Option<String> {
    let t = target(method, params)?;
    let scope = match method {
        "tools/call" => catalog.tool(t.name.as_deref()?)?.scope(),
        "prompts/get" => catalog.prompt(t.name.as_deref()?)?.scope(),
        "completion/complete" => match (t.name.as_deref(), t.uri.as_deref()) {
            (Some(prompt), _) => catalog.prompt(prompt)?.scope(),
            (None, uri_template) => catalog.template_by_uri(uri_template?)?.scope(),
        },
        // Reading or watching a resource.
        _ => {
            let uri = t.uri.as_deref()?;
            match catalog.resource(uri) {
                Some(r) => r.scope(),
                None => catalog.match_template(uri)?.0.scope(),
            }
        }
    };
    scope.map(String::from)
}
