"""The MCP SDK team's @modelcontextprotocol/server-everything (npm, over stdio) behind a gateway
fleet, driven by the Python SDK (mcp 2.3.0) through the fleet's load balancer, with the holder
stopped mid-session (crates/gateway/tests/server_everything.rs runs it).

Phase one: tools, a long-running operation with progress, sampling and elicitation answered
here, the server's own roots/list answered here, a subscription and its update. Then it prints
`READY` and waits for a line on stdin (the test kills the holder meanwhile). Phase two, the same
session: the same calls again, answered by a new process of the server on the other instance,
and the subscription made again (the new process never saw the old one's: documented).
Usage: venv/bin/python server_everything_failover_client.py http://127.0.0.1:PORT/mcp
Prints one JSON line {"ok": true, "steps": [...]} and exits 0, or a reason on stderr and exits 1.
"""

import sys
import warnings

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

from stdio_client import check, until, url_main

# resources/subscribe is a session-era method; the SDK warns that 2026-07-28 removed it.
warnings.simplefilter("ignore", MCPDeprecationWarning)

URI = "demo://resource/dynamic/text/1"


def texts(result) -> str:
    return "\n".join(c.text for c in result.content if isinstance(getattr(c, "text", None), str))


class Seen:
    """What the server sent or asked outside answers."""

    def __init__(self) -> None:
        self.progress: list[float] = []
        self.updated: list[str] = []
        self.roots_asked = 0

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    async def on_message(self, message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))

    async def roots(self, context) -> types.ListRootsResult:
        self.roots_asked += 1
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/python-failover", name="failover")])


async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="sampled by the python client"),
        model="gateway-failover-model",
        stop_reason="endTurn",
    )


async def elicitation(context, params) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def calls(client: Client, seen: Seen, phase: str, steps: list[str]) -> None:
    """The calls both phases make; each checked against what server-everything answers."""
    echo = await client.call_tool("echo", {"message": f"{phase} through the fleet"})
    check(texts(echo) == f"Echo: {phase} through the fleet", f"echo: {echo}")

    seen.progress.clear()
    long = await client.call_tool(
        "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=seen.on_progress
    )
    check("completed" in texts(long), f"long operation: {long}")
    await until(lambda: len(seen.progress) == 3, f"progress: {seen.progress}")

    sampled = await client.call_tool("trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 10})
    check("sampled by the python client" in texts(sampled), f"sampling: {sampled}")

    elicited = await client.call_tool("trigger-elicitation-request", {})
    check("- Name: Ada" in texts(elicited), f"elicitation: {elicited}")

    # The server asks for the roots on its own once initialized (on the session's GET stream,
    # no request of ours running); a new process after the failover asks again.
    await until(lambda: seen.roots_asked > 0, "the server never asked for the roots", 10)
    roots = await client.call_tool("get-roots-list", {})
    check("file:///srv/python-failover" in texts(roots), f"roots: {roots}")

    seen.updated.clear()
    await client.subscribe_resource(URI)
    # Switches the process's periodic updates on (a new process starts with them off).
    await client.call_tool("toggle-subscriber-updates", {})
    await until(lambda: URI in seen.updated, f"no resources/updated for {URI}", 15)
    steps.append(
        f"{phase}: echo, progress {','.join(str(int(p)) for p in seen.progress)}, sampling, "
        f"elicitation accepted, roots, subscribe + updated {URI}"
    )


async def run(url: str, steps: list[str]) -> None:
    seen = Seen()
    client = Client(
        streamable_http_client(url),  # sends DELETE on close
        mode="legacy",
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=seen.roots,
        message_handler=seen.on_message,
    )
    async with client:
        server = client.server_info.name if client.server_info else None
        check(server is not None and "everything" in server, f"serverInfo: {client.server_info}")
        steps.append(f"connect: server {server}, protocol {client.protocol_version}")
        await calls(client, seen, "before", steps)
        print("READY", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        seen.roots_asked = 0
        await calls(client, seen, "after", steps)
    steps.append("closed: DELETE sent")


if __name__ == "__main__":
    sys.exit(url_main("server_everything_failover_client", run))
