//! The crate README's "Testing without HTTP" example, verbatim (tests/readme.rs checks it):
//! run here, since a doctest does not run a `#[tokio::test]`.

use fleetmcp::model::{ElicitResult, ElicitationAction};
use fleetmcp::{NoArgs, Server, TestClient, tool};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn calculator() -> Server {
    Server::builder("calculator", "1.0.0")
        .tool(
            tool("add").handler(|args: Add, _ctx| async move { Ok((args.a + args.b).to_string()) }),
        )
        .tool(tool("reset").handler(|_: NoArgs, ctx| async move {
            Ok(if ctx.confirm("Reset?").await? {
                "reset"
            } else {
                "kept"
            })
        }))
        .build()
}

#[tokio::test]
async fn add_adds_and_reset_asks_first() -> Result<(), Box<dyn std::error::Error>> {
    for version in ["2025-11-25", "2026-07-28"] {
        let client = calculator()
            .test_client()
            .protocol_version(version)
            .elicitation(|_message, _schema| ElicitResult::new(ElicitationAction::Decline))
            .connect()
            .await?;
        let sum = client
            .call_tool("add", serde_json::json!({"a": 2, "b": 3}))
            .await?;
        assert_eq!(TestClient::text(&sum), "5");
        let reset = client.call_tool("reset", NoArgs {}).await?;
        assert_eq!(TestClient::text(&reset), "kept");
        client.stop().await;
    }
    Ok(())
}
