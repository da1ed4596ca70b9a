"""Drive agora-node's MCP prompts and resources with the real mcp 2.3.0 client.

Usage: prompts_client.py SCENARIO MCP_URL [ARGS] [--mode auto|2026-07-28|legacy]

--mode is the client's `mode=` (default "auto"; see sdk_client.py).

  prompts GETS_JSON     prompts/list page by page (cursor passed back verbatim), then
                        prompts/get of each [name, arguments] in the JSON list, in turn,
                        then resources/list page by page and resources/read of each listed
                        resource
  reload                list prompts, print "ready" once the session's GET stream is open
                        (legacy) or at once, wait for notifications/prompts/list_changed,
                        list prompts again

Prints one JSON line of what the SDK observed (pages, each get's description and
messages or its error with its JSON-RPC code, resources and their reads,
notifications); tests/e2e/mcp_prompts.rs asserts on it. Nothing is judged here.
"""

import asyncio
import json
import sys

import anyio

# The SDK helpers of the main client script (beside this one): one way to
# connect in a mode and to report what the SDK saw.
from sdk_client import TIMEOUT, client, command_line, dump, emit, error_of, pages_of, read


class GetStream:
    """Whether the legacy session's GET stream is open, through an httpx event hook."""

    def __init__(self):
        self.open = anyio.Event()

    async def on_request(self, request):
        pass

    async def on_response(self, response):
        if response.request.method == "GET" and response.status_code == 200:
            self.open.set()


async def get(connected, name, arguments):
    try:
        result = await connected.get_prompt(name, arguments)
    except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
        return {"name": name, **error_of(exc)}
    return {
        "name": name,
        "description": result.description,
        "messages": [
            {"role": m.role, "type": m.content.type, "text": getattr(m.content, "text", None)}
            for m in result.messages
        ],
    }


async def prompts(url, gets):
    mcp, http = client(url)
    async with http:
        async with mcp as connected:
            pages = await pages_of(connected.list_prompts, "prompts")
            got = [await get(connected, name, arguments) for name, arguments in gets]
            resource_pages = await pages_of(connected.list_resources, "resources")
            uris = [r["uri"] for page in resource_pages for r in page["resources"]]
            reads = [await read(connected, uri) for uri in uris]
            capabilities = dump(connected.server_capabilities)
            version = connected.protocol_version
        emit(
            protocolVersion=version,
            capabilities=capabilities,
            pages=pages,
            gets=got,
            resourcePages=resource_pages,
            reads=reads,
        )


async def reload(url):
    notifications = []
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, Exception):
            notifications.append({"exception": repr(message)})
            return
        method = getattr(message, "method", None)
        notifications.append({"method": method})
        if method == "notifications/prompts/list_changed":
            changed.set()

    stream = GetStream()
    mcp, http = client(url, wire=stream, message_handler=on_message)
    async with http:
        async with mcp as connected:
            before = await pages_of(connected.list_prompts, "prompts")
            with anyio.move_on_after(TIMEOUT):
                await stream.open.wait()
            # The test changes the plugins folder only after this line.
            print("ready", flush=True)
            with anyio.move_on_after(TIMEOUT):
                await changed.wait()
            after = await pages_of(connected.list_prompts, "prompts")
            version = connected.protocol_version
        emit(
            protocolVersion=version,
            before=before,
            after=after,
            notified=changed.is_set(),
            notifications=notifications,
        )


async def main(argv):
    scenario, url, positional, _options = command_line(argv)
    if scenario == "prompts":
        await prompts(url, json.loads(positional[0]))
    elif scenario == "reload":
        await reload(url)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
