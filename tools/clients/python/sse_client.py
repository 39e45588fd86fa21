"""Drives help-desk over the 2024-11-05 HTTP+SSE transport with the official Python client.

Usage: venv/bin/python sse_client.py http://127.0.0.1:PORT/sse
Prints one JSON line {"ok": true, "steps": [...]} and exits 0; on failure prints the reason to
stderr and exits 1.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client


async def main(url: str) -> list[str]:
    steps: list[str] = []
    async with sse_client(url, timeout=10) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            steps.append(f"initialize: protocol {init.protocol_version}, server {init.server_info.name}")
            tools = await session.list_tools()
            names = sorted(t.name for t in tools.tools)
            assert "open_ticket" in names, names
            steps.append(f"list_tools: {len(names)} tools")
            opened = await session.call_tool("open_ticket", {"title": "Old client", "priority": "low"})
            ticket = opened.structured_content or json.loads(opened.content[0].text)
            assert isinstance(ticket.get("id"), int), ticket
            steps.append(f"open_ticket: id {ticket['id']}")
            sla = await session.read_resource("helpdesk://policies/sla")
            assert sla.contents and sla.contents[0].text, sla
            steps.append("read_resource helpdesk://policies/sla: non-empty")
    return steps


if __name__ == "__main__":
    try:
        done = asyncio.run(main(sys.argv[1]))
    except BaseException as e:  # noqa: BLE001 - any failure is the test's failure
        print(f"sse client failed: {type(e).__name__}: {e}", file=sys.stderr)
        print(json.dumps({"ok": False}), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"ok": True, "steps": done}))
