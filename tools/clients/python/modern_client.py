"""Stateless-era smoke client on the Python SDK (mcp 2.3.0) for the `everything` fixture.

It proves that a real 2026-07-28 client works against the server, not just the conformance suite:
server/discover (auto), per-request _meta and mirrored headers, InputRequiredResult multi-round
requests driven by the SDK, and subscriptions/listen.

Usage: venv/bin/python modern_client.py URL MODE
  MODE 2026-07-28 -> mcp.Client(url, mode="2026-07-28"): modern, no probe
  MODE auto       -> mode="auto": server/discover probe, fallback to initialize
  MODE legacy     -> mode="legacy": initialize at 2025-11-25
Prints one JSON line {"ok": true, "mode": ..., "protocolVersion": ..., "steps": [...]} and exits 0,
or the reason on stderr and exits 1 (2 for a usage error).
"""

import asyncio
import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client  # private, but keeps the SDK's timeouts

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
EXPECTED = {MODERN: MODERN, "auto": MODERN, "legacy": LEGACY}
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
LIST_CHANGED_WAIT_S = 5.0
# Every request (and the listen acknowledgment) gets this deadline, so a hung server fails quickly.
READ_TIMEOUT_S = 10.0
STATIC_TEXT = "This is the content of the static text resource."


class CheckFailed(Exception):
    pass


def check(cond: object, why: str) -> None:
    if not cond:
        raise CheckFailed(why)


def text_of(contents) -> str:
    return next((c.text for c in contents or [] if isinstance(getattr(c, "text", None), str)), "")


async def run(url: str, mode: str, steps: list[str], wire: list[dict[str, Any]]) -> str:
    expect = EXPECTED[mode]
    modern = expect == MODERN

    # The wire as the SDK sent it (JSON-RPC method, id, MRTR fields, HTTP status), through our own
    # httpx client's hooks: checks the probe, the retries and the listen id without a proxy. An entry
    # is recorded when the request goes out and gets its status when the answer comes: a POSTed
    # JSON-RPC response's 202 may arrive after the result it unblocked.
    by_request: dict[int, dict[str, Any]] = {}

    async def on_request(request) -> None:
        body: Any = None
        try:
            body = json.loads(request.content) if request.content else None
        except (ValueError, RuntimeError):  # RuntimeError: a streamed body that cannot be re-read
            body = None
        body = body if isinstance(body, dict) else {}
        params = body.get("params") if isinstance(body.get("params"), dict) else {}
        entry = {
            "http": request.method,
            "status": None,
            "method": body.get("method"),
            "id": body.get("id"),
            "isResponse": bool(body) and "method" not in body,
            "hasInputResponses": "inputResponses" in params,
            "mcpMethodHeader": request.headers.get("mcp-method"),
            "versionHeader": request.headers.get("mcp-protocol-version"),
            "sessionHeader": request.headers.get("mcp-session-id") is not None,
        }
        wire.append(entry)
        by_request[id(request)] = entry

    async def on_response(response) -> None:
        entry = by_request.pop(id(response.request), None)
        if entry is not None:
            entry["status"] = response.status_code

    async def settled(timeout: float = 2.0) -> None:
        """Wait (bounded) until every request sent so far has its HTTP status."""
        with anyio.move_on_after(timeout):
            while any(w["status"] is None for w in wire):
                await anyio.sleep(0.02)

    elicitations: list[Any] = []

    async def on_elicit(_context, params):
        # Both eras: the SDK's MRTR driver (2026) and a real elicitation/create request (2025).
        elicitations.append(params)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    raw_tool_changes: list[Any] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            raw_tool_changes.append(message)

    http = create_mcp_http_client()
    http.event_hooks["request"].append(on_request)
    http.event_hooks["response"].append(on_response)
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport,
            mode=mode,
            elicitation_callback=on_elicit,
            message_handler=on_message,
            read_timeout_seconds=READ_TIMEOUT_S,
        ) as client:
            version = client.protocol_version
            print(f"negotiated protocol version: {version}", file=sys.stderr)
            check(version == expect, f"negotiated protocol version {version}, expected {expect}")
            first = wire[0] if wire else None
            if mode == "auto":
                check(first and first["method"] == "server/discover" and first["status"] == 200,
                      f"first exchange was not a 200 server/discover: {first}")
            if modern:
                check(not any(w["method"] == "initialize" for w in wire), "modern connect sent initialize")
            else:
                check(first and first["method"] == "initialize", f"first exchange was not initialize: {first}")
            server = client.server_info.name if client.server_info else "?"
            how = first["method"] if first else "no request (version adopted)"
            steps.append(f"connect: {how} -> protocol {version}, server {server}")

            tools = (await client.list_tools(cache_mode="refresh")).tools
            names = [t.name for t in tools]
            check("test_simple_text" in names, f"tools/list lacks test_simple_text: {names}")
            steps.append(f"list_tools: {len(tools)} tools incl. test_simple_text")
            if modern:
                check(not any(w["sessionHeader"] for w in wire), "modern requests carried Mcp-Session-Id")
                check(all(w["versionHeader"] == MODERN for w in wire if w["http"] == "POST"),
                      f"modern POST without MCP-Protocol-Version {MODERN}: {wire}")

            simple = await client.call_tool("test_simple_text", {})
            check(not simple.is_error and text_of(simple.content), f"test_simple_text: {simple}")
            steps.append(f"call_tool test_simple_text: {text_of(simple.content)!r}")

            res = await client.read_resource("test://static-text", cache_mode="bypass")
            check(text_of(res.contents) == STATIC_TEXT, f"test://static-text: {res.contents}")
            steps.append("read_resource test://static-text: expected text")

            before = len(wire)
            hello = await client.call_tool("test_input_required_result_elicitation", {})
            hello_text = text_of(hello.content)
            check(not hello.is_error and hello_text == "Hello, Ada!", f"elicitation tool answered {hello}")
            check(len(elicitations) == 1, f"elicitation callback ran {len(elicitations)} times")
            calls = [w for w in wire[before:] if w["method"] == "tools/call"]
            if modern:
                # Round 1 gets an InputRequiredResult; the SDK retries once with inputResponses on a new id.
                check(len(calls) == 2 and not calls[0]["hasInputResponses"] and calls[1]["hasInputResponses"],
                      f"MRTR rounds on the wire: {calls}")
                check(calls[0]["id"] != calls[1]["id"], "MRTR retry reused the JSON-RPC id")
                check(not any(w["isResponse"] for w in wire[before:]), "modern client POSTed a JSON-RPC response")
                steps.append("call_tool test_input_required_result_elicitation: input_required -> callback"
                             f" -> retry with inputResponses -> {hello_text!r}")
            else:
                check(len(calls) == 1, f"legacy tools/call was sent {len(calls)} times")
                await settled()
                answer = next((w for w in wire[before:] if w["isResponse"]), None)
                check(answer and answer["status"] == 202, f"elicitation answer POST: {answer}")
                steps.append("call_tool test_input_required_result_elicitation: elicitation/create request"
                             f" -> callback -> {hello_text!r}")

            if modern:
                listen_at = len(wire)
                async with client.listen(tools_list_changed=True) as sub:
                    # The listen POST's response is the SSE stream, so its hook fires once the head arrives.
                    listen = next((w for w in wire[listen_at:] if w["method"] == "subscriptions/listen"), None)
                    check(listen and listen["status"] == 200, f"subscriptions/listen POST: {listen}")
                    check(listen["id"] == sub.subscription_id,
                          f"listen id on the wire {listen['id']!r}, SDK {sub.subscription_id!r}")
                    check(sub.honored.tools_list_changed is True, f"acknowledged filter {sub.honored}")
                    steps.append(f"listen: id {sub.subscription_id!r}, acknowledged"
                                 f" {sub.honored.model_dump(by_alias=True, exclude_none=True)}")

                    trigger = await client.call_tool("test_trigger_tool_change", {})
                    check(not trigger.is_error, f"test_trigger_tool_change: {trigger}")
                    try:
                        event = await asyncio.wait_for(anext(sub), LIST_CHANGED_WAIT_S)
                    except TimeoutError:
                        raise CheckFailed(
                            f"no notifications/tools/list_changed within {LIST_CHANGED_WAIT_S:.0f} s") from None
                    # The SDK routes only frames whose _meta names this subscription id to `sub`.
                    check(isinstance(event, ToolsListChanged), f"listen event {event!r}")
                    # The SDK tees the same frame to message_handler from a separate task.
                    with anyio.move_on_after(2.0):
                        while not raw_tool_changes:
                            await anyio.sleep(0.02)
                    check(raw_tool_changes, "list_changed event without the raw notification")
                    params = raw_tool_changes[-1].params
                    tag = (params.meta or {}).get(SUBSCRIPTION_ID) if params is not None else None
                    check(tag == sub.subscription_id,
                          f"list_changed tagged {tag!r}, subscription id {sub.subscription_id!r}")
                    steps.append(f"call_tool test_trigger_tool_change ({text_of(trigger.content)!r})"
                                 f" -> notifications/tools/list_changed tagged {tag!r}")

                    after = [t.name for t in (await client.list_tools()).tools]
                    had = "test_dynamic_tool" in names
                    check(("test_dynamic_tool" in after) != had,
                          f"test_dynamic_tool presence did not flip (before {had}, after {after})")
                    steps.append(f"list_tools after change: test_dynamic_tool {'removed' if had else 'added'}")
                steps.append("listen closed")
    return version


def leaf(err: BaseException) -> BaseException:
    # anyio wraps transport failures in ExceptionGroups; report the first real cause.
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[2] not in EXPECTED:
        print(f"usage: modern_client.py URL {'|'.join(EXPECTED)}", file=sys.stderr)
        return 2
    url, mode = sys.argv[1], sys.argv[2]
    steps: list[str] = []
    wire: list[dict[str, Any]] = []
    try:
        version = asyncio.run(run(url, mode, steps, wire))
    except Exception as err:  # any failure, assertion or transport, is a failed check
        err = leaf(err)
        print(f"python modern client ({mode}) failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"wire: {json.dumps(wire)}", file=sys.stderr)
        print(json.dumps({"ok": False, "mode": mode, "steps": steps}), file=sys.stderr)
        return 1
    if os.environ.get("MODERN_CLIENT_WIRE"):
        print(f"wire: {json.dumps(wire)}", file=sys.stderr)
    print(json.dumps({"ok": True, "mode": mode, "protocolVersion": version, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
