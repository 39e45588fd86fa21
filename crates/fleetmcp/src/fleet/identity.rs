//! How an instance names itself to load balancers in distributed mode, on every answer (the
//! fleet's [`Gate`](crate::transport::Gate) marks each): `X-FrontMCP-Machine-Id` on every
//! response, and the `__frontmcp_node` affinity cookie on the responses that open a session
//! (`initialize`, and the 2024-11-05 `GET /sse` stream, whose session cannot move).

use axum::response::Response;
use http::{HeaderValue, StatusCode, header};

use crate::transport::{MACHINE_ID_HEADER, SESSION_HEADER};

/// The header values, computed once.
pub(super) struct Identity {
    machine_id: HeaderValue,
    cookie: HeaderValue,
}

impl Identity {
    /// This instance's name as header values; `None` (with a warning) for a machine id that is
    /// no valid header value, whose responses then name no instance.
    pub fn new(machine_id: &str) -> Option<Self> {
        let (Ok(id), Ok(cookie)) = (
            HeaderValue::from_str(machine_id),
            HeaderValue::from_str(&format!(
                "__frontmcp_node={machine_id}; Path=/; Max-Age=86400; HttpOnly; SameSite=Strict"
            )),
        ) else {
            tracing::warn!(
                machine_id,
                "the machine id is not a valid header value; responses will not name this instance"
            );
            return None;
        };
        Some(Self {
            machine_id: id,
            cookie,
        })
    }

    /// Names this instance on `res`, the answer to a request that opened a 2024-11-05 stream
    /// when `opens_stream`: the header always (unless a relayed answer already names its
    /// holder), the cookie when the answer opens a session.
    pub fn mark(&self, opens_stream: bool, res: &mut Response) {
        let opens_session = res.status() == StatusCode::OK
            && (res.headers().contains_key(SESSION_HEADER) || opens_stream);
        let h = res.headers_mut();
        // A relayed answer already names the holder that served it.
        if !h.contains_key(MACHINE_ID_HEADER) {
            h.insert(MACHINE_ID_HEADER, self.machine_id.clone());
        }
        if opens_session {
            h.insert(header::SET_COOKIE, self.cookie.clone());
        }
    }
}
