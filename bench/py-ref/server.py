"""The Python reference of bench/run.sh: help-desk's `find_tickets` on the official Python SDK
(`mcp` 2.x, `MCPServer`, formerly FastMCP) over Streamable HTTP with sessions, served by uvicorn.
Runs with the venv tools/setup.sh builds (tools/clients/python/venv). PORT sets the port."""

import os

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import PlainTextResponse

server = MCPServer("help-desk", version="0.1.0")


@server.tool()
def find_tickets(query: str | None = None, status: str | None = None) -> dict:
    """Finds tickets by words in their title or description, and by status."""
    return {"tickets": []}


@server.custom_route("/healthz", methods=["GET"])
async def healthz(request):
    """bench/run.sh waits for this to answer 200."""
    return PlainTextResponse("ok")


app = server.streamable_http_app(json_response=True)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "3000")), log_level="warning")
