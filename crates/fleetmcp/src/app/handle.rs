//! [`ServerHandle`]: changes a running server (its catalog) and announces changes to connected
//! clients, from a handler (`ctx.server()`) or from the program that built the server.

use std::sync::Arc;

use bytes::Bytes;

use super::{App, Change};
use crate::catalog::state::Needs;
use crate::catalog::{BuildError, PromptDef, ResourceDef, ToolDef};
use crate::events::STANDALONE_STREAM;
use crate::protocol::encode_notification;
use crate::session::Session;

/// Changes a running server: its catalog, and announcements to connected clients.
#[derive(Clone)]
pub struct ServerHandle {
    app: App,
}

impl ServerHandle {
    pub(crate) fn new(app: App) -> Self {
        Self { app }
    }

    /// Adds (or replaces) a tool and tells every session `notifications/tools/list_changed`.
    /// Refused, as [`ServerBuilder::try_build`](crate::ServerBuilder::try_build) refuses it,
    /// when its handler needs state the server was not given.
    pub async fn add_tool(&self, def: Arc<ToolDef>) -> Result<(), BuildError> {
        self.check_state(def.needs())?;
        self.app.change_catalog(|c| c.with_tool(def.clone()));
        self.list_changed(Change::ToolsListChanged, "notifications/tools/list_changed")
            .await;
        Ok(())
    }
    /// Removes a tool and tells every session.
    pub async fn remove_tool(&self, name: &str) {
        self.app.change_catalog(|c| c.without_tool(name));
        self.list_changed(Change::ToolsListChanged, "notifications/tools/list_changed")
            .await;
    }
    /// Adds (or replaces) a prompt and tells every session; refused as
    /// [`ServerHandle::add_tool`] is.
    pub async fn add_prompt(&self, def: Arc<PromptDef>) -> Result<(), BuildError> {
        self.check_state(def.needs())?;
        self.app.change_catalog(|c| c.with_prompt(def.clone()));
        self.list_changed(
            Change::PromptsListChanged,
            "notifications/prompts/list_changed",
        )
        .await;
        Ok(())
    }
    /// Removes a prompt and tells every session.
    pub async fn remove_prompt(&self, name: &str) {
        self.app.change_catalog(|c| c.without_prompt(name));
        self.list_changed(
            Change::PromptsListChanged,
            "notifications/prompts/list_changed",
        )
        .await;
    }
    /// Adds (or replaces) a resource and tells every session; refused as
    /// [`ServerHandle::add_tool`] is.
    pub async fn add_resource(&self, def: Arc<ResourceDef>) -> Result<(), BuildError> {
        self.check_state(def.needs())?;
        self.app.change_catalog(|c| c.with_resource(def.clone()));
        self.list_changed(
            Change::ResourcesListChanged,
            "notifications/resources/list_changed",
        )
        .await;
        Ok(())
    }
    /// Removes a resource and tells every session.
    pub async fn remove_resource(&self, uri: &str) {
        self.app.change_catalog(|c| c.without_resource(uri));
        self.list_changed(
            Change::ResourcesListChanged,
            "notifications/resources/list_changed",
        )
        .await;
    }

    /// The state check of a declaration added at runtime (see `catalog/state.rs`).
    fn check_state(&self, needs: Option<(String, Needs)>) -> Result<(), BuildError> {
        BuildError::check(needs, |id| self.app.has_state(id))
    }

    /// Sends `notifications/resources/updated` to every session subscribed to `uri`, on this
    /// instance and, in distributed mode, on every other one.
    pub async fn notify_resource_updated(&self, uri: &str) {
        self.app.publish(&Change::ResourceUpdated(uri.to_string()));
        self.resource_updated_here(uri).await;
    }

    /// Sends a notification to one session's standalone (`GET`) stream, wherever the session is
    /// held: here, or, in distributed mode, on the instance that holds it (through that
    /// instance's channel; never broadcast). Returns whether a holder took it: held here, that
    /// its event store stored it (a store that did not answer may still store it later, so
    /// `false` does not promise the message is lost); a message for a session no live instance
    /// holds is dropped (and counted in the log).
    ///
    /// ```no_run
    /// # async fn page(handle: fleetmcp::ServerHandle, sid: &str) {
    /// let params = serde_json::json!({"level": "info", "data": "your ticket was closed"});
    /// handle.notify_session(sid, "notifications/message", &params).await;
    /// # }
    /// ```
    pub async fn notify_session(
        &self,
        session_id: &str,
        method: &str,
        params: &serde_json::Value,
    ) -> bool {
        if let Some(s) = self.app.sessions().held_session(session_id) {
            return self.append(&s, encode_notification(method, params)).await;
        }
        self.app.to_holder(session_id, method, params).await
    }

    /// Delivers a message another instance routed here for session `session_id`: to its
    /// standalone stream if this instance holds it; dropped otherwise (a routed message is
    /// never routed again). Returns whether it was delivered.
    pub(crate) async fn deliver_routed(
        &self,
        session_id: &str,
        method: &str,
        params: &serde_json::Value,
    ) -> bool {
        match self.app.sessions().held_session(session_id) {
            Some(s) => self.append(&s, encode_notification(method, params)).await,
            None => false,
        }
    }

    /// A change announced by another instance of the fleet: to this instance's listen streams,
    /// and a resource update to its subscribed sessions too (a list change is not applied to
    /// this instance's catalog, which is its own).
    pub(crate) async fn apply_remote(&self, change: Change) {
        match change {
            Change::ResourceUpdated(uri) => self.resource_updated_here(&uri).await,
            list => self.app.announce(list),
        }
    }

    async fn resource_updated_here(&self, uri: &str) {
        self.app.announce(Change::ResourceUpdated(uri.to_string()));
        let msg = encode_notification(
            "notifications/resources/updated",
            &serde_json::json!({"uri": uri}),
        );
        for s in self.app.sessions().all() {
            if s.is_subscribed(uri) {
                self.append(&s, msg.clone()).await;
            }
        }
    }

    /// Whether the catalog has a tool of this name now.
    pub fn has_tool(&self, name: &str) -> bool {
        self.app.catalog().tool(name).is_some()
    }

    /// Whether the catalog has a prompt of this name now.
    pub fn has_prompt(&self, name: &str) -> bool {
        self.app.catalog().prompt(name).is_some()
    }

    /// Sessions this instance holds.
    pub fn session_count(&self) -> usize {
        self.app.sessions().held()
    }

    /// The `subscriptions/listen` streams open on this instance: callers with one open, streams,
    /// and the bytes of the URIs they filter on. All zero once every stream has closed. (For
    /// tests: not API.)
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn listen_streams(&self) -> crate::limits::PlacesSnapshot {
        self.app.listens().snapshot()
    }

    /// Bytes of client data (subscriptions, listen filters) this instance keeps now, counted
    /// against `sessions.max_client_data_bytes`. (For tests: not API.)
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn client_data_bytes(&self) -> usize {
        self.app.client_data().used()
    }

    /// A list change: to 2026-07-28 listeners, and as `method` to every session's standalone
    /// stream.
    async fn list_changed(&self, change: Change, method: &str) {
        self.app.publish(&change);
        self.app.announce(change);
        let msg = encode_notification(method, &serde_json::json!({}));
        for s in self.app.sessions().all() {
            self.append(&s, msg.clone()).await;
        }
    }

    /// Appends `msg` to the session's standalone stream; whether the store took it.
    async fn append(&self, s: &Session, msg: Bytes) -> bool {
        match self
            .app
            .events()
            .append(&s.id, STANDALONE_STREAM, msg)
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(session = %crate::session::LogId(&s.id), error = %e, "could not queue a notification");
                false
            }
        }
    }
}
