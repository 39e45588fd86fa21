"""stdio smoke client on the Python SDK (mcp 2.3.0): the SDK starts the server binary as its child
process (FLEETMCP_TRANSPORT=stdio in its environment) and speaks newline-delimited JSON-RPC on
its stdin and stdout.

The SDK's default mode ("auto") is kept: it sends server/discover first, which a stdio session
before initialize refuses, and falls back to the initialize handshake.
Usage: venv/bin/python stdio_client.py everything|help-desk COMMAND [ARG...]
`everything` drives progress, logging, resources and subscriptions, completion, prompts, sampling,
elicitation and roots answered here, list changes and cancellation; `help-desk` the desk's flow.
Prints one JSON line {"ok": true, "steps": [...]} and exits 0, or a reason on stderr and exits 1.
"""

import asyncio
import json
import sys
import tempfile
import warnings

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning

# logging/setLevel, resources/subscribe and ping are what a session-era (stdio) client uses; the
# SDK warns that 2026-07-28 removed them, which is no news here.
warnings.simplefilter("ignore", MCPDeprecationWarning)


class CheckFailed(Exception):
    pass


def check(cond: object, why: str) -> None:
    if not cond:
        raise CheckFailed(why)


def text_of(contents) -> str:
    return next((c.text for c in contents if isinstance(getattr(c, "text", None), str)), "")


class Seen:
    """What the server sent outside answers."""

    def __init__(self) -> None:
        self.progress: list[float] = []
        self.logs: list[object] = []
        self.updated: list[str] = []
        self.tools_changed = 0

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def on_message(self, message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, types.ToolListChangedNotification):
            self.tools_changed += 1


async def until(cond, why: str, seconds: float = 5.0) -> None:
    with anyio.move_on_after(seconds):
        while not cond():
            await anyio.sleep(0.02)
    check(cond(), why)


async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"echo: {asked}"),
        model="stdio-test-model",
        stop_reason="endTurn",
    )


async def elicitation(context, params) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})


async def roots(context) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///work/desk", name="desk")])


async def everything(client: Client, seen: Seen, steps: list[str]) -> None:
    tools = (await client.list_tools()).tools
    check(any(t.name == "test_sampling" for t in tools), "tools/list lacks test_sampling")
    steps.append(f"list_tools: {len(tools)} tools")

    r = await client.call_tool("test_tool_with_progress", {}, progress_callback=seen.on_progress)
    check(text_of(r.content) == "Progress test completed", f"progress tool: {r}")
    await until(lambda: len(seen.progress) == 3, f"progress {seen.progress}")
    steps.append(f"progress: {','.join(str(int(p)) for p in seen.progress)}")

    await client.set_logging_level("info")
    await client.call_tool("test_tool_with_logging", {})
    await until(lambda: len(seen.logs) >= 3, f"log messages: {seen.logs}")
    steps.append(f"logging: {len(seen.logs)} messages")

    static = await client.read_resource("test://static-text")
    check("static text resource" in text_of(static.contents), "static text resource")
    await client.subscribe_resource("test://watched-resource")
    await client.call_tool("test_notify_resource_updated", {})
    await until(lambda: "test://watched-resource" in seen.updated, "no resources/updated")
    steps.append("subscribe: notifications/resources/updated test://watched-resource")

    done = await client.complete(
        types.ResourceTemplateReference(type="ref/resource", uri="test://template/{id}/data"),
        {"name": "id", "value": "12"},
    )
    check(done.completion.values == ["123", "124"], f"completion {done}")
    steps.append(f"complete: {','.join(done.completion.values)}")

    prompt = await client.get_prompt("test_simple_prompt")
    check(prompt.messages[0].content.text == "This is a simple prompt for testing.", "prompt text")
    steps.append("get_prompt test_simple_prompt")

    s = await client.call_tool("test_sampling", {"prompt": "hi"})
    check(text_of(s.content) == "LLM response: echo: hi", f"sampling: {s}")
    e = await client.call_tool("test_elicitation", {"message": "who?"})
    check("action=accept" in text_of(e.content) and "ada" in text_of(e.content), f"elicitation: {e}")
    r = await client.call_tool("test_roots", {})
    check("file:///work/desk" in text_of(r.content), f"roots: {r}")
    steps.append("sampling, elicitation and roots answered by the client")

    await client.call_tool("test_trigger_tool_change", {})
    await until(lambda: seen.tools_changed > 0, "no tools/list_changed")
    steps.append("notifications/tools/list_changed")

    # Abandoning the call sends notifications/cancelled (the SDK's courtesy cancel).
    with anyio.move_on_after(0.3) as scope:
        await client.call_tool("test_cancellable", {"work_ms": 10000})
    check(scope.cancelled_caught, "test_cancellable finished instead of being cancelled")
    stats: dict = {}
    for _ in range(100):
        stats = json.loads(text_of((await client.read_resource("test://stats")).contents))
        if stats.get("cancelled", 0) >= 1:
            break
        await anyio.sleep(0.05)
    check(stats.get("cancelled", 0) >= 1 and stats.get("completed") == 0, f"stats after cancel: {stats}")
    steps.append(f"cancel: handler stopped ({json.dumps(stats, sort_keys=True)})")

    await client.send_ping()
    steps.append("ping")


async def help_desk(client: Client, seen: Seen, steps: list[str]) -> None:
    tools = (await client.list_tools()).tools
    check(any(t.name == "open_ticket" for t in tools), "tools/list lacks open_ticket")
    steps.append(f"list_tools: {len(tools)} tools")
    opened = await client.call_tool("open_ticket", {"title": "Printer on fire", "priority": "high"})
    tid = (opened.structured_content or {}).get("id")
    check(type(tid) is int, f"open_ticket: {opened}")
    steps.append(f"open_ticket: id {tid}")
    found = await client.call_tool("find_tickets", {"query": "printer"}, progress_callback=seen.on_progress)
    check(len((found.structured_content or {}).get("tickets", [])) == 1, f"find_tickets: {found}")
    await until(lambda: len(seen.progress) == 1, f"find_tickets progress: {seen.progress}")
    steps.append("find_tickets with progress: 1 notification")
    uri = f"helpdesk://tickets/{tid}"
    await client.subscribe_resource(uri)
    await client.call_tool("close_ticket", {"id": tid, "resolution": "Extinguished"})
    await until(lambda: uri in seen.updated, f"no resources/updated for {uri}")
    ticket = json.loads(text_of((await client.read_resource(uri)).contents))
    check(ticket.get("status") == "closed", f"ticket: {ticket}")
    steps.append(f"subscribe + close_ticket: updated {uri}")
    done = await client.complete(
        types.ResourceTemplateReference(type="ref/resource", uri="helpdesk://tickets/{id}"),
        {"name": "id", "value": ""},
    )
    check(str(tid) in done.completion.values, f"completion: {done}")
    steps.append(f"complete: {','.join(done.completion.values)}")
    prompt = await client.get_prompt("triage_ticket", {"ticket_id": str(tid)})
    check(str(tid) in prompt.messages[0].content.text, "triage prompt")
    steps.append("get_prompt triage_ticket")


async def run(target: str, command: list[str], steps: list[str]) -> None:
    seen = Seen()
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={"FLEETMCP_TRANSPORT": "stdio", "RUST_LOG": "info"}
    )
    with tempfile.TemporaryFile(mode="w+") as errlog:
        client = Client(
            stdio_client(params, errlog=errlog),
            sampling_callback=sampling,
            elicitation_callback=elicitation,
            list_roots_callback=roots,
            logging_callback=seen.on_log,
            message_handler=seen.on_message,
        )
        async with client:
            server = client.server_info.name if client.server_info else None
            check(server == target, f"server {server}")
            steps.append(f"connect: stdio, protocol {client.protocol_version}, server {server}")
            await (everything if target == "everything" else help_desk)(client, seen, steps)
        errlog.seek(0)
        log = errlog.read()
    check("serving MCP on stdio" in log, f"no log on stderr: {log}")
    steps.append("logs on stderr only")


def leaf(err: BaseException) -> BaseException:
    # anyio wraps transport failures in ExceptionGroups; report the first real cause.
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def url_main(name: str, run) -> int:
    """The main of a client run against one URL: `await run(url, steps)`; one JSON line on stdout
    {"ok": true, "steps": [...]} and 0, or the reason on stderr, the steps so far, and 1."""
    if len(sys.argv) != 2:
        print(f"usage: {name}.py URL", file=sys.stderr)
        return 2
    steps: list[str] = []
    try:
        asyncio.run(run(sys.argv[1], steps))
    except Exception as err:  # any failure, assertion or transport, is a failed check
        err = leaf(err)
        print(f"python {name} failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(json.dumps({"ok": False, "steps": steps}), flush=True)
        return 1
    print(json.dumps({"ok": True, "steps": steps}), flush=True)
    return 0


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("everything", "help-desk"):
        print("usage: stdio_client.py everything|help-desk COMMAND [ARG...]", file=sys.stderr)
        return 2
    steps: list[str] = []
    try:
        asyncio.run(run(sys.argv[1], sys.argv[2:], steps))
    except Exception as err:  # any failure, assertion or transport, is a failed check
        err = leaf(err)
        print(f"python stdio client failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(json.dumps({"ok": False, "steps": steps}), file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
