//! Tools: a name, a JSON Schema for the arguments, and an async handler.
//!
//! ```
//! use fleetmcp::{tool, Structured};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Add { a: i64, b: i64 }
//! #[derive(Serialize, JsonSchema)]
//! struct Sum { sum: i64 }
//!
//! let add = tool("add")
//!     .description("Adds two integers")
//!     .handler(|args: Add, _ctx| async move { Ok(Structured(Sum { sum: args.a + args.b })) });
//! assert_eq!(add.name(), "add");
//! assert!(add.descriptor().output_schema.is_some(), "taken from `Sum`");
//! ```
//!
//! One idea a file: `builder.rs` declares a tool, `def.rs` is the declared tool the server
//! holds and calls, `schema.rs` makes the schemas it publishes from Rust types, `result.rs`
//! what a handler returns and `error.rs` what its failures mean to the client.

mod builder;
mod def;
mod error;
mod result;
mod schema;

pub use builder::{ToolBuilder, tool};
pub use def::ToolDef;
pub use error::ToolError;
pub(in crate::catalog) use error::{Classified, classify};
pub use result::{IntoToolResult, Structured};
pub(crate) use result::{Output, ToolOutput};
pub(in crate::catalog) use schema::{NullForm, doc_description, generate};

use schemars::JsonSchema;

/// Arguments of a tool that takes none. (`Serialize` too: a test calls such a tool with
/// [`TestClient::call_tool`](crate::TestClient::call_tool)`(name, NoArgs {})`.)
// No description in its schema: this doc comment would otherwise describe every tool and
// prompt without arguments (`tool/schema.rs`'s `doc_description`).
#[derive(Debug, Default, serde::Deserialize, serde::Serialize, JsonSchema)]
#[schemars(description = "")]
pub struct NoArgs {}
