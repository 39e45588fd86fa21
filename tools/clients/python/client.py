"""Help-desk smoke client on the Python SDK (mcp 2.3.0), legacy era.

mcp 2.x defaults to mode="auto" (server/discover at 2026-07-28 first); this script pins
mode="legacy" so it checks the 2025-11-25 session path that most clients use.
Usage: venv/bin/python client.py http://127.0.0.1:PORT/mcp
Prints one JSON line {"ok": true, "steps": [...]} and exits 0, or a reason on stderr and exits 1.
"""

import asyncio
import json
import sys

from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client  # private, but keeps the SDK's timeouts


class CheckFailed(Exception):
    pass


def check(cond: object, why: str) -> None:
    if not cond:
        raise CheckFailed(why)


def text_of(contents) -> str:
    return next((c.text for c in contents if isinstance(getattr(c, "text", None), str)), "")


async def run(url: str, steps: list[str]) -> None:
    # mcp 2.3.0 no longer hands out the session id (streamable_http_client yields only the two
    # streams), so watch the HTTP traffic through our own httpx client to see it, and the DELETE.
    seen: dict[str, object] = {}

    async def on_response(response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and "session_id" not in seen:
            seen["session_id"] = sid
        if response.request.method == "DELETE":
            seen["delete"] = response.status_code

    http = create_mcp_http_client()
    http.event_hooks["response"].append(on_response)
    async with http:
        transport = streamable_http_client(url, http_client=http)  # sends DELETE on close
        async with Client(transport, mode="legacy") as client:
            check(seen.get("session_id"), "no Mcp-Session-Id after initialize")
            check(client.protocol_version == "2025-11-25", f"protocol version {client.protocol_version}")
            server = client.server_info.name if client.server_info else None
            steps.append(f"connect: session {seen['session_id']}, protocol {client.protocol_version}, server {server}")

            tools = {t.name: t for t in (await client.list_tools()).tools}
            for name in ("open_ticket", "find_tickets", "close_ticket"):
                check(name in tools, f"tools/list lacks {name}")
                check(tools[name].input_schema.get("type") == "object", f"{name} has no object inputSchema")
            steps.append(f"list_tools: {len(tools)} tools")

            opened = await client.call_tool("open_ticket", {"title": "Printer on fire", "priority": "high"})
            check(not opened.is_error, f"open_ticket isError: {text_of(opened.content)}")
            ticket = opened.structured_content or {}
            # bool is an int subclass in Python; JSON true must not pass as an id.
            check(type(ticket.get("id")) is int, f"open_ticket structuredContent.id not an integer: {ticket}")
            check(ticket.get("status") == "open" and ticket.get("priority") == "high", f"open_ticket ticket: {ticket}")
            check(text_of(opened.content), "open_ticket has no text content")
            tid = ticket["id"]
            steps.append(f"open_ticket: id {tid}")

            closed = await client.call_tool("close_ticket", {"id": tid, "resolution": "Extinguished"})
            check(not closed.is_error and (closed.structured_content or {}).get("status") == "closed",
                  f"close_ticket: {closed}")
            steps.append(f"close_ticket: id {tid} closed")

            res = await client.read_resource(f"helpdesk://tickets/{tid}")
            body = json.loads(text_of(res.contents))
            check(body.get("id") == tid and body.get("status") == "closed", f"ticket resource: {body}")
            steps.append(f"read_resource helpdesk://tickets/{tid}: status closed")

            sla = await client.read_resource("helpdesk://policies/sla")
            check(text_of(sla.contents), "SLA policy is empty")
            steps.append("read_resource helpdesk://policies/sla: non-empty")

            templates = (await client.list_resource_templates()).resource_templates
            check(any(t.uri_template == "helpdesk://tickets/{id}" for t in templates),
                  "template helpdesk://tickets/{id} missing")
            steps.append("list_resource_templates: helpdesk://tickets/{id}")

            prompt = await client.get_prompt("triage_ticket", {"ticket_id": str(tid)})
            first = next((m.content.text for m in prompt.messages if isinstance(getattr(m.content, "text", None), str)), "")
            check(prompt.messages and str(tid) in first, f"triage_ticket prompt: {prompt.messages}")
            steps.append(f"get_prompt triage_ticket: {len(prompt.messages)} message(s) mention {tid}")

            # Servers may report bad arguments either as a JSON-RPC error or as a tool error; both are valid.
            try:
                bad = await client.call_tool("close_ticket", {"id": tid})
                check(bad.is_error, f"close_ticket without resolution succeeded: {bad}")
                steps.append("close_ticket without resolution: isError result")
            except MCPError as err:
                check(err.code == -32602, f"close_ticket without resolution: unexpected error {err.code} {err}")
                steps.append("close_ticket without resolution: MCPError -32602")

    # Leaving the transport context sent the DELETE; 405 would mean the server keeps sessions alive.
    check(seen.get("delete") in (200, 202, 204), f"DELETE answered {seen.get('delete')}")
    steps.append(f"terminate session: DELETE {seen['delete']}")


def leaf(err: BaseException) -> BaseException:
    # anyio wraps transport failures in ExceptionGroups; report the first real cause.
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: client.py URL", file=sys.stderr)
        return 2
    steps: list[str] = []
    try:
        asyncio.run(run(sys.argv[1], steps))
    except Exception as err:  # any failure, assertion or transport, is a failed check
        err = leaf(err)
        print(f"python client failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(json.dumps({"ok": False, "steps": steps}), file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
