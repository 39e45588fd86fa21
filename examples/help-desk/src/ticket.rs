//! What the help desk keeps: tickets, their priority and status.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How urgent a ticket is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

/// Whether a ticket is still being worked on.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Open,
    Closed,
}

/// One ticket (also its stored form in Redis, as JSON).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Ticket {
    pub id: u64,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub priority: Priority,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// Who opened it (the subject of their access token), when authorization is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_by: Option<String>,
}

/// A ticket before the desk gave it an id.
pub struct NewTicket {
    pub title: String,
    pub description: Option<String>,
    pub priority: Priority,
    /// Who opens it, when authorization is on.
    pub opened_by: Option<String>,
}

impl NewTicket {
    /// The open ticket this becomes under `id`.
    pub fn with_id(self, id: u64) -> Ticket {
        Ticket {
            id,
            title: self.title,
            description: self.description,
            priority: self.priority,
            status: Status::Open,
            resolution: None,
            opened_by: self.opened_by,
        }
    }
}

impl Ticket {
    /// Whether this ticket has `status` (any, if `None`) and contains `query` (lowercase, in its
    /// title or description; any, if `None`).
    pub fn matches(&self, query: Option<&str>, status: Option<Status>) -> bool {
        status.is_none_or(|s| s == self.status)
            && query.is_none_or(|q| {
                self.title.to_lowercase().contains(q)
                    || self
                        .description
                        .as_ref()
                        .is_some_and(|d| d.to_lowercase().contains(q))
            })
    }

    /// Closes the ticket with `resolution` (closing a closed ticket again replaces it).
    pub fn close(&mut self, resolution: String) {
        self.status = Status::Closed;
        self.resolution = Some(resolution);
    }
}
