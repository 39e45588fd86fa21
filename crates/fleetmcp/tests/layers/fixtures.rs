//! The checker of `layers.rs` run on small crates written here, each breaking one rule in one
//! way.

use super::*;

/// A crate root for the fixtures: real module names, so they sit in the real layers.
const LIB: &str = "\
mod protocol;
mod redis_config;
mod redis_conn;
mod telemetry;
mod auth;
mod limits;
mod tasks;
mod session;
mod app;
mod catalog;
mod context;
mod dispatch;
mod transport;
mod fleet;
mod server;
pub use server::Server;
pub use catalog::{tool as make_tool, Catalog};
";

/// Checks `lib.rs` ([`LIB`]) plus `files`.
fn report_of(files: &[(&str, &str)]) -> Report {
    let mut all = vec![("lib.rs".to_string(), LIB.to_string())];
    all.extend(files.iter().map(|(n, s)| (n.to_string(), s.to_string())));
    check_crate(&all)
}

/// Checks `lib.rs` plus `files`, and gives each finding as `file:line path rule`.
fn check(files: &[(&str, &str)]) -> Vec<String> {
    let report = report_of(files);
    assert!(report.unplaced.is_empty(), "{:?}", report.unplaced);
    report
        .violations
        .iter()
        .map(|v| {
            // Every message names the file and line, the path and both layers (or the other
            // crate).
            let text = v.to_string();
            assert!(text.contains(&format!("(layer {})", v.from.1)), "{text}");
            match v.to {
                (_, Some(layer)) => assert!(text.contains(&format!("layer {layer}")), "{text}"),
                (ref name, None) => assert!(text.contains(&format!("`{name}`")), "{text}"),
            }
            format!("{}:{} {} {:?}", v.file, v.line, v.path, v.rule)
        })
        .collect()
}

#[test]
fn a_multi_line_group_reaching_up_is_reported_at_its_leaf() {
    let got = check(&[(
        "session/store.rs",
        "use crate::{\n    protocol::Id,\n    server::Builder,\n    app::{self, App as A},\n};\n",
    )]);
    assert_eq!(
        got,
        [
            "session/store.rs:3 crate::server::Builder Up",
            "session/store.rs:4 crate::app Up",
            "session/store.rs:4 crate::app::App Up",
        ]
    );
}

#[test]
fn a_restricted_or_public_reexport_reaching_up_is_reported() {
    let got = check(&[(
        "session/mod.rs",
        "pub(crate) use crate::transport::reply;\npub use crate::dispatch::*;\npub(super) use self::store::Store;\n",
    )]);
    assert_eq!(
        got,
        [
            "session/mod.rs:1 crate::transport::reply Up",
            "session/mod.rs:2 crate::dispatch::* Up"
        ]
    );
}

#[test]
fn super_super_climbing_into_a_higher_module_is_reported() {
    // session/store/mod.rs is `crate::session::store`: two `super`s reach the root. An
    // inline `mod tests` is a module too: three `super`s from there.
    let got = check(&[(
        "session/store/mod.rs",
        "use super::super::transport::Relay;\n\
         use super::super::protocol::Id;\n\
         use super::lifecycle::Sessions;\n\
         mod tests {\n    use super::super::super::fleet::Heartbeat;\n    use super::super::Store;\n}\n",
    )]);
    assert_eq!(
        got,
        [
            "session/store/mod.rs:1 super::super::transport::Relay Up",
            "session/store/mod.rs:5 super::super::super::fleet::Heartbeat Up",
        ]
    );
}

#[test]
fn a_name_the_root_reexports_counts_as_its_module() {
    let got = check(&[(
        "protocol/wire.rs",
        "use crate::Server;\nfn f(_: &crate::Catalog) -> crate::Server { todo!() }\nfn g() { crate::make_tool(); }\n",
    )]);
    assert_eq!(
        got,
        [
            "protocol/wire.rs:1 crate::Server Up",
            "protocol/wire.rs:2 crate::Catalog Up",
            "protocol/wire.rs:2 crate::Server Up",
            "protocol/wire.rs:3 crate::make_tool Up",
        ]
    );
}

#[test]
fn a_path_in_code_reaching_up_is_reported() {
    let got = check(&[(
        "session/lifecycle.rs",
        "fn f() {\n    let _ = crate::fleet::f();\n}\n\
         impl crate::dispatch::Handler for S {}\n\
         fn g() -> Vec<crate::app::App> { tracing::info!(x = ?crate::server::name()); vec![] }\n\
         fn h() { use crate::transport::reply; }\n",
    )]);
    assert_eq!(
        got,
        [
            "session/lifecycle.rs:2 crate::fleet::f Up",
            "session/lifecycle.rs:4 crate::dispatch::Handler Up",
            "session/lifecycle.rs:5 crate::app::App Up",
            "session/lifecycle.rs:5 crate::server::name Up",
            "session/lifecycle.rs:6 crate::transport::reply Up",
        ]
    );
}

#[test]
fn http_below_transport_is_reported_and_allowed_from_transport() {
    let code = "use axum::Json;\nuse ::hyper::body::Incoming;\n\
                fn f(h: &http::HeaderMap) -> http::StatusCode {\n    assert!(matches!(x, http::Method::GET));\n    http::StatusCode::OK\n}\n";
    let got = check(&[("dispatch/tools.rs", code), ("transport/post.rs", code)]);
    assert_eq!(
        got,
        [
            "dispatch/tools.rs:1 axum::Json Http",
            "dispatch/tools.rs:2 ::hyper::body::Incoming Http",
            "dispatch/tools.rs:3 http::HeaderMap Http",
            "dispatch/tools.rs:3 http::StatusCode Http",
            "dispatch/tools.rs:4 http::Method::GET Http",
            "dispatch/tools.rs:5 http::StatusCode::OK Http",
        ]
    );
}

/// One crate that uses every kind of path the rules allow: down a layer, within a layer that
/// does not keep its modules apart, HTTP from transport, Redis where nothing forbids it,
/// `session`'s own items from inside it, names the root re-exports from above their module.
#[test]
fn a_crate_that_keeps_every_rule_passes() {
    let got = check(&[
        ("protocol/mod.rs", "pub struct Id;\n"),
        ("telemetry/mod.rs", "use crate::protocol::Id;\n"),
        (
            "redis_conn.rs",
            "use redis::Cmd;\nuse crate::telemetry::Meters;\n",
        ),
        (
            "auth/mod.rs",
            "use crate::protocol::Id;\nfn f() { reqwest::get(); }\n",
        ),
        (
            "limits/mod.rs",
            "mod redis;\nuse crate::redis_conn::RedisConn;\nuse redis::RedisLimits;\n",
        ),
        (
            "tasks/mod.rs",
            "use crate::protocol::Id;\nuse crate::redis_conn::RedisConn;\n",
        ),
        (
            "session/mod.rs",
            "mod live;\nuse live::LiveSessions;\nuse crate::session::live::Session;\nuse crate::tasks::TaskRecord;\n",
        ),
        (
            "app/mod.rs",
            "use crate::catalog::Catalog;\nuse crate::context::Ctx;\nuse crate::session::Sessions;\n",
        ),
        ("catalog/mod.rs", "use crate::session::Sessions;\n"),
        (
            "dispatch/mod.rs",
            "use crate::app::App;\nuse crate::Catalog;\nuse crate::limits::Limits;\n",
        ),
        (
            "transport/mod.rs",
            "use axum::Router;\nuse crate::dispatch;\nfn f() -> http::StatusCode { http::StatusCode::OK }\n",
        ),
        (
            "fleet/mod.rs",
            "use crate::transport::Relay;\nuse crate::redis_conn::RedisConn;\n",
        ),
        (
            "server/mod.rs",
            "use crate::fleet::Fleet;\nuse crate::Server;\n",
        ),
    ]);
    assert_eq!(got, Vec::<String>::new());
}

#[test]
fn modules_a_layer_keeps_apart_are_reported_and_others_are_not() {
    let got = check(&[
        (
            "auth/mod.rs",
            "use crate::tasks::TaskRecord;\nuse crate::protocol::Id;\n",
        ),
        ("limits/mod.rs", "fn f(_: crate::auth::Principal) {}\n"),
        (
            "app/mod.rs",
            "use crate::catalog::Catalog;\nuse crate::Catalog as C;\n",
        ),
    ]);
    assert_eq!(
        got,
        [
            "auth/mod.rs:1 crate::tasks::TaskRecord SameLayer",
            "limits/mod.rs:1 crate::auth::Principal SameLayer",
        ]
    );
}

/// Redis below the layers that may know it, and JSON-RPC in `limits`: each way of naming
/// it, in a `use` and in code; a child module named like a crate is that module.
#[test]
fn what_a_module_knows_nothing_of_is_reported() {
    let got = check(&[
        (
            "protocol/mod.rs",
            "use crate::redis_conn::RedisConn;\nuse redis;\n",
        ),
        (
            "telemetry/meters.rs",
            "use super::super::redis_config::RedisConfig;\n",
        ),
        (
            "dispatch/tools.rs",
            "fn f() { let _ = ::redis::cmd(\"GET\"); }\nfn g() { tracing::info!(x = ?redis::Value::Nil); }\n",
        ),
        (
            "limits/mod.rs",
            "use crate::protocol::ErrorData;\nmod redis;\nuse redis::RedisLimits;\n",
        ),
        (
            "dispatch/mod.rs",
            "mod redis;\nfn f() -> redis::Local { todo!() }\n",
        ),
    ]);
    assert_eq!(
        got,
        [
            "protocol/mod.rs:1 crate::redis_conn::RedisConn Apart(\"Redis\")",
            "protocol/mod.rs:2 redis Apart(\"Redis\")",
            "telemetry/meters.rs:1 super::super::redis_config::RedisConfig Apart(\"Redis\")",
            "dispatch/tools.rs:1 ::redis::cmd Apart(\"Redis\")",
            "dispatch/tools.rs:2 redis::Value::Nil Apart(\"Redis\")",
            "limits/mod.rs:1 crate::protocol::ErrorData Apart(\"JSON-RPC\")",
        ]
    );
}

/// `session`'s live registry, named from outside however it is reached; from inside, not.
#[test]
fn an_item_a_module_keeps_to_itself_is_reported_outside_it() {
    let lib = format!("{LIB}pub(crate) use session::live::LiveSessions as Registry;\n");
    let all: Vec<(String, String)> = [
        ("lib.rs", lib.as_str()),
        (
            "transport/locate.rs",
            "use crate::session::live::LiveSessions;\nuse crate::session::{LiveSessions as L, Session};\nfn f(_: &crate::Registry) {}\n",
        ),
        ("app/mod.rs", "use crate::session::live;\n"),
        ("session/lifecycle.rs", "use super::live::LiveSessions;\nuse crate::Registry;\n"),
    ]
    .iter()
    .map(|(n, s)| (n.to_string(), s.to_string()))
    .collect();
    let got: Vec<String> = check_crate(&all)
        .violations
        .iter()
        .map(|v| format!("{}:{} {} {:?}", v.file, v.line, v.path, v.rule))
        .collect();
    assert_eq!(
        got,
        [
            "transport/locate.rs:1 crate::session::live::LiveSessions Private",
            "transport/locate.rs:2 crate::session::LiveSessions Private",
            "transport/locate.rs:3 crate::Registry Private",
            "app/mod.rs:1 crate::session::live Private",
        ]
    );
}

#[test]
fn comments_strings_and_other_names_are_not_paths() {
    let got = check(&[(
        "session/mod.rs",
        "//! See [`crate::server::Server`].\n\
         // crate::fleet for why\n\
         /// Not [`http::StatusCode`] here.\n\
         fn f(http: u8, x: &X) -> &str {\n    mycrate::server::x();\n    let _ = self.http;\n    let _ = x.http;\n    \"crate::transport::reply http::StatusCode\"\n}\n\
         use crate::protocol::Id;\nuse super::protocol::Id as I;\n",
    )]);
    assert_eq!(got, Vec::<String>::new());
}

#[test]
fn a_module_with_no_layer_is_reported() {
    let all = [
        (
            "lib.rs".to_string(),
            "mod protocol;\nmod gateway;\n".to_string(),
        ),
        (
            "gateway/mod.rs".to_string(),
            "use crate::protocol::Id;\n".to_string(),
        ),
    ];
    assert_eq!(check_crate(&all).unplaced, ["gateway"]);
}

/// Checks `lib.rs` plus `files` for circles, each given as its `Display`.
fn circles(files: &[(&str, &str)]) -> Vec<String> {
    let cycles = report_of(files).cycles;
    cycles.iter().map(ToString::to_string).collect()
}

/// Three files of one folder in a circle, one of them a folder of its own reached through a
/// file in it (and reaching back from another); two top-level modules of one layer, which the
/// layer rules allow to import each other.
#[test]
fn files_or_folders_that_import_each_other_in_a_circle_are_reported() {
    let got = circles(&[
        ("fleet/mod.rs", "mod a;\nmod b;\nmod c;\n"),
        ("fleet/a.rs", "use super::b::B;\npub struct A;\n"),
        (
            "fleet/b.rs",
            "pub struct B;\nfn f() -> crate::fleet::c::wire::C { todo!() }\n",
        ),
        ("fleet/c/mod.rs", "pub mod wire;\n"),
        ("fleet/c/wire.rs", "pub struct C;\n"),
        ("fleet/c/read.rs", "use super::super::a::A;\n"),
        ("app/mod.rs", "use crate::catalog::Catalog;\n"),
        (
            "catalog/mod.rs",
            "pub struct Catalog;\nfn f(_: &crate::app::App) {}\n",
        ),
    ]);
    assert_eq!(
        got,
        [
            "in the crate root, app, catalog import each other in a circle:\n    \
             app -> catalog: app/mod.rs:1: `crate::catalog::Catalog` (catalog/mod.rs)\n    \
             catalog -> app: catalog/mod.rs:2: `crate::app::App` (app/mod.rs)",
            "in crate::fleet, a, b, c import each other in a circle:\n    \
             a -> b: fleet/a.rs:1: `super::b::B` (fleet/b.rs)\n    \
             b -> c: fleet/b.rs:2: `crate::fleet::c::wire::C` (fleet/c/wire.rs)\n    \
             c -> a: fleet/c/read.rs:1: `super::super::a::A` (fleet/a.rs)",
        ]
    );
}

/// A chain of siblings (`a` to `b` to `c`, and `a` to `c`); a parent and its children using
/// each other (`super::Type` one way, the child's items the other, `context.rs` and
/// `context/` included); test code that reaches back up the chain, inline or in a file of its
/// own: no circle.
#[test]
fn a_chain_a_parent_with_its_children_and_test_code_make_no_circle() {
    let files = [
        (
            "fleet/mod.rs",
            "mod a;\nmod b;\nmod c;\npub struct Shared;\nuse a::A;\nfn f() -> self::c::C { todo!() }\n",
        ),
        (
            "fleet/a.rs",
            "use super::b::B;\nuse super::c::C;\nuse super::Shared;\n",
        ),
        (
            "fleet/b.rs",
            "use crate::fleet::c::C;\nuse crate::fleet::Shared;\n",
        ),
        (
            "fleet/c.rs",
            "pub struct C;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod more {\n    use super::super::a::A;\n}\n",
        ),
        ("fleet/c/tests.rs", "use crate::fleet::b::B;\n"),
        (
            "context.rs",
            "mod elicit;\npub struct Ctx;\nuse self::elicit::Form;\n",
        ),
        ("context/elicit.rs", "use super::Ctx;\npub struct Form;\n"),
    ];
    assert_eq!(check(&files), Vec::<String>::new());
    assert_eq!(circles(&files), Vec::<String>::new());
}
