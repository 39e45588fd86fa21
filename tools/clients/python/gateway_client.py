"""Gateway smoke client on the Python SDK (mcp 2.3.0): our `everything` served over stdio behind
`fleetmcp-gateway`, reached over Streamable HTTP (session era, mode="legacy"), with the same
checks stdio_client.py makes of `everything` served over stdio directly: progress, logging,
resources and subscriptions, completion, prompts, sampling, elicitation and roots answered here,
list changes and cancellation, all through the gateway (crates/gateway/tests/gateway.rs runs it).
Usage: venv/bin/python gateway_client.py http://127.0.0.1:PORT/mcp
Prints one JSON line {"ok": true, "steps": [...]} and exits 0, or a reason on stderr and exits 1.
"""

import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from stdio_client import Seen, check, elicitation, everything, roots, sampling, url_main


async def run(url: str, steps: list[str]) -> None:
    seen = Seen()
    client = Client(
        streamable_http_client(url),  # sends DELETE on close
        mode="legacy",
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
        logging_callback=seen.on_log,
        message_handler=seen.on_message,
    )
    async with client:
        server = client.server_info.name if client.server_info else None
        check(server == "everything", f"server {server}: the upstream's serverInfo, not the gateway's")
        steps.append(f"connect: gateway, protocol {client.protocol_version}, server {server}")
        await everything(client, seen, steps)


if __name__ == "__main__":
    sys.exit(url_main("gateway_client", run))
