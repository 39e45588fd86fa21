"""Drives `everything` over stdio behind `fleetmcp-gateway` through the 2024-11-05 HTTP+SSE
transport (`/sse` + `/message`) with the official Python client (mcp 2.3.0): tools, progress
and a sampling request answered here (crates/gateway/tests/gateway.rs runs it).
Usage: venv/bin/python gateway_sse_client.py http://127.0.0.1:PORT/sse
Prints one JSON line {"ok": true, "steps": [...]} and exits 0, or a reason on stderr and exits 1.
"""

import asyncio
import json
import sys

import mcp_types as types
from mcp import ClientSession
from mcp.client.sse import sse_client


async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="sampled by the client"),
        model="sse-test-model",
        stop_reason="endTurn",
    )


async def run(url: str, steps: list[str]) -> None:
    progress: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(p)

    async with sse_client(url, timeout=10) as (read, write):
        async with ClientSession(read, write, sampling_callback=sampling) as session:
            init = await session.initialize()
            assert init.server_info.name == "everything", init.server_info
            steps.append(f"initialize: protocol {init.protocol_version}, server {init.server_info.name}")
            tools = await session.list_tools()
            assert any(t.name == "test_sampling" for t in tools.tools), tools
            steps.append(f"list_tools: {len(tools.tools)} tools")
            r = await session.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
            assert r.content[0].text == "Progress test completed", r
            for _ in range(100):
                if len(progress) == 3:
                    break
                await asyncio.sleep(0.02)
            assert len(progress) == 3, progress
            steps.append(f"progress: {','.join(str(int(p)) for p in progress)}")
            s = await session.call_tool("test_sampling", {"prompt": "hi"})
            assert s.content[0].text == "LLM response: sampled by the client", s
            steps.append("sampling: answered by the client")


def main() -> int:
    steps: list[str] = []
    try:
        asyncio.run(run(sys.argv[1], steps))
    except Exception as err:  # any failure is a failed check
        while isinstance(err, BaseExceptionGroup) and err.exceptions:
            err = err.exceptions[0]
        print(f"python sse client failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(json.dumps({"ok": False, "steps": steps}), file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
