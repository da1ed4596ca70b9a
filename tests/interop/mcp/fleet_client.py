"""The real mcp 2.3.0 client against a fleet, as behind a round-robin load
balancer without stickiness: each HTTP request the SDK makes goes to the next
node's URL in turn, so one session's requests (initialize, its notification
stream, tool calls, the answer to an approval form, the DELETE) are spread over
every node.

Usage: fleet_client.py CALLS_JSON MCP_URL [MCP_URL ...] [--mode auto|2026-07-28|legacy]

At 2026-07-28 (the default "auto" mode adopts it) there is no session: each
request, an approval's answered retry included, may go to any node.

  CALLS_JSON            [name, arguments] pairs called in turn in one session; an
                        approval form is answered with approve=true

Prints one JSON line: the results, the elicitations asked, the session id, and
every HTTP exchange with the port of the node that answered it. Nothing is
judged here; tests/e2e/mcp_fleet.rs asserts on it.
"""

import asyncio
import json
import os
import sys

import httpx2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sdk_client as sdk  # noqa: E402 - the same directory, made importable just above


class RoundRobin:
    """An httpx2 request hook (the HTTP client of the SDK) sending each request to the next node."""

    def __init__(self, urls):
        self.nodes = [httpx2.URL(url) for url in urls]
        self.sent = 0

    async def on_request(self, request):
        node = self.nodes[self.sent % len(self.nodes)]
        self.sent += 1
        request.url = request.url.copy_with(host=node.host, port=node.port)
        request.headers["host"] = f"{node.host}:{node.port}"


async def call_across(urls, calls, mode):
    wire = sdk.Wire()
    balancer = RoundRobin(urls)
    elicitations = sdk.Elicitations("accept", None)
    http = sdk.create_mcp_http_client()
    ports = []

    async def on_response(response):
        ports.append(response.request.url.port)
        await wire.on_response(response)

    http.event_hooks = {"request": [wire.on_request, balancer.on_request], "response": [on_response]}
    mcp = sdk.Client(
        sdk.streamable_http_client(urls[0], http_client=http),
        read_timeout_seconds=sdk.TIMEOUT,
        elicitation_callback=elicitations,
        mode=mode,
    )
    results = []
    async with http:
        async with mcp as connected:
            for name, arguments in calls:
                try:
                    results.append(sdk.result_of(await connected.call_tool(name, arguments)))
                except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
                    results.append(sdk.error_of(exc))
        for exchange, port in zip(wire.exchanges, ports):
            exchange["port"] = port
        sdk.emit(
            results=results,
            elicitations=elicitations.asked,
            sessionId=wire.session_id(),
            exchanges=wire.exchanges,
        )


def main(argv):
    mode = "auto"
    if "--mode" in argv:
        at = argv.index("--mode")
        mode = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    asyncio.run(call_across(argv[1:], json.loads(argv[0]), mode))


if __name__ == "__main__":
    main(sys.argv[1:])
