"""Drive agora-node's MCP server with the real mcp 2.3.0 client.

Usage: sdk_client.py SCENARIO MCP_URL [ARGS] [--mode auto|2026-07-28|legacy]

--mode is the client's `mode=` (default "auto": server/discover first, adopting
2026-07-28 when the server answers it, else initialize; "2026-07-28": pinned,
no discover; "legacy": the 2025-11-25 initialize handshake only).

  init                  connect, then leave
  list                  tools/list page by page until no nextCursor
  call CALLS_JSON [--elicit MODE] [--feedback TEXT]
                        tools/call of each [name, arguments] in the JSON list, in turn, in
                        one session; MODE says how the elicitation callback answers:
                        accept (approve=true), reject (approve=false + feedback), decline,
                        cancel, wait (never answers), none (no callback: the SDK then
                        declares no elicitation capability). Default: none.
  reload                list tools and resources, print "ready" once the session's GET stream
                        is open, wait for notifications/tools/list_changed and
                        notifications/resources/list_changed, list both again
  resources [URI ...]   resources/list page by page, resources/read of each listed resource
                        and of each URI given, resources/templates/list
  parallel N            N clients at once, each connecting and calling convert_units
  rounds TOOL ARGS_JSON PLAN
                        (2026 modes) drive an approval round by hand: call TOOL, get the
                        InputRequiredResult, then send each step of PLAN (comma-separated) as a
                        retry: ok (accept approve=true), wrongkey, tamper, noanswer, otherargs
                        (the arguments of --other-args OTHER_JSON), othertool (convert_units), replay (ok again),
                        fresh (a new call and its accepted answer), late (ok after 2.5 s)
  listen                (2026 modes) list, open subscriptions/listen for the three list kinds
                        and one resource URI, print "ready", collect events until tools,
                        resources and prompts changed, list again
  listen-end            (2026 modes) open a listen and iterate until the stream ends: "graceful"
                        or the exception

Prints one JSON line of what the SDK observed (protocol version, server info,
capabilities, tools, results' isError/text/structuredContent, the elicitation
requests the callback received, session ids, every HTTP exchange as method,
JSON-RPC method and status, SDK errors with their codes); tests/e2e/mcp.rs
asserts on it. Nothing is judged here.
"""

import asyncio
import json
import sys

import anyio
from mcp import Client
from mcp import types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

# Generous: a liveness bound for a debug node on a loaded 2-core machine, not a speed target.
TIMEOUT = 60.0
SESSION_HEADER = "mcp-session-id"


def emit(**observed):
    print(json.dumps(observed), flush=True)


def dump(model):
    return None if model is None else model.model_dump(by_alias=True, mode="json", exclude_none=True)


def error_of(exc):
    """An exception as the test sees it: its class, and the JSON-RPC code of an MCPError."""
    observed = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, MCPError):
        observed["code"] = exc.code
    return observed


def result_of(result: types.CallToolResult):
    return {
        "isError": result.is_error,
        "texts": [c.text for c in result.content if getattr(c, "type", None) == "text"],
        "contentTypes": [getattr(c, "type", None) for c in result.content],
        "structuredContent": result.structured_content,
    }


class Wire:
    """The HTTP exchanges of one client, seen through httpx event hooks: what the SDK sent and got."""

    def __init__(self):
        self.exchanges = []
        self.get_stream_open = anyio.Event()
        self.initialized_answered = anyio.Event()
        # The capabilities the client declared in its initialize request, as sent.
        self.declared = None

    async def on_request(self, request):
        method = None
        if request.method == "POST":
            try:
                message = json.loads(request.content)
            except ValueError:
                message = None
            if isinstance(message, dict):
                method = message.get("method")
                params = message.get("params") or {}
                if method == "initialize":
                    self.declared = params.get("capabilities")
                elif self.declared is None and "_meta" in params:
                    # At 2026-07-28 every request declares them in its envelope.
                    self.declared = params["_meta"].get("io.modelcontextprotocol/clientCapabilities")
        request.extensions["rpc_method"] = method

    async def on_response(self, response):
        request = response.request
        self.exchanges.append(
            {
                "http": request.method,
                "rpc": request.extensions.get("rpc_method"),
                "status": response.status_code,
                "sentSession": request.headers.get(SESSION_HEADER),
                "session": response.headers.get(SESSION_HEADER),
                "contentType": response.headers.get("content-type"),
                "version": request.headers.get("mcp-protocol-version"),
                "mcpMethod": request.headers.get("mcp-method"),
                "mcpName": request.headers.get("mcp-name"),
            }
        )
        if request.method == "GET" and response.status_code == 200:
            self.get_stream_open.set()
        if request.extensions.get("rpc_method") == "notifications/initialized":
            self.initialized_answered.set()

    def session_id(self):
        """The session id the server gave at initialize."""
        for exchange in self.exchanges:
            if exchange["rpc"] == "initialize" and exchange["session"]:
                return exchange["session"]
        return None


class Elicitations:
    """An elicitation callback answering as the scenario says, and what it was asked."""

    def __init__(self, mode, feedback):
        self.mode = mode
        self.feedback = feedback
        self.asked = []

    async def __call__(self, context, params):
        self.asked.append(dump(params))
        if self.mode == "accept":
            return types.ElicitResult(action="accept", content={"approve": True})
        if self.mode == "reject":
            content = {"approve": False}
            if self.feedback is not None:
                content["feedback"] = self.feedback
            return types.ElicitResult(action="accept", content=content)
        if self.mode == "decline":
            return types.ElicitResult(action="decline")
        if self.mode == "cancel":
            return types.ElicitResult(action="cancel")
        # "wait": a human who never answers; the server's approval timeout decides.
        await anyio.sleep(TIMEOUT * 10)
        return types.ElicitResult(action="cancel")


# The client's mode, from --mode (main sets it once for the run).
MODE = "auto"


def client(url, wire=None, elicitation=None, message_handler=None):
    """The stock client in MODE; `wire` (optional) sees every request and response."""
    http = create_mcp_http_client()
    if wire is not None:
        http.event_hooks = {"request": [wire.on_request], "response": [wire.on_response]}
    kwargs = {"read_timeout_seconds": TIMEOUT, "mode": MODE}
    if elicitation is not None:
        kwargs["elicitation_callback"] = elicitation
    if message_handler is not None:
        kwargs["message_handler"] = message_handler
    # The stock transport with an httpx client of the SDK's own making: only the hooks are added.
    return Client(streamable_http_client(url, http_client=http), **kwargs), http


def connection_of(connected: Client):
    return {
        "protocolVersion": connected.protocol_version,
        "serverInfo": dump(connected.server_info),
        "capabilities": dump(connected.server_capabilities),
    }


async def pages_of(list_page, field):
    """Every page of one list verb, following nextCursor (at most 50 pages)."""
    pages = []
    cursor = None
    while True:
        page = await list_page(cursor=cursor, cache_mode="bypass")
        pages.append({field: [dump(item) for item in getattr(page, field)], "nextCursor": page.next_cursor})
        cursor = page.next_cursor
        if cursor is None or len(pages) > 50:
            return pages


async def list_pages(connected: Client):
    return await pages_of(connected.list_tools, "tools")


async def resource_pages(connected: Client):
    return await pages_of(connected.list_resources, "resources")


async def read(connected: Client, uri):
    try:
        result = await connected.read_resource(uri)
    except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
        return {"uri": uri, **error_of(exc)}
    return {"uri": uri, "contents": [dump(c) for c in result.contents], "ttlMs": getattr(result, "ttl_ms", None)}


async def resources(url, extra_uris):
    wire = Wire()
    mcp, http = client(url, wire)
    async with http:
        async with mcp as connected:
            observed = connection_of(connected)
            pages = await resource_pages(connected)
            listed = [r["uri"] for page in pages for r in page["resources"]]
            reads = [await read(connected, uri) for uri in listed + extra_uris]
            templates = await connected.list_resource_templates()
        emit(
            **observed,
            pages=pages,
            reads=reads,
            templates=[dump(t) for t in templates.resource_templates],
            exchanges=wire.exchanges,
        )


async def init(url):
    wire = Wire()
    mcp, http = client(url, wire)
    async with http:
        async with mcp as connected:
            observed = connection_of(connected)
            # The SDK POSTs notifications/initialized as the connection opens and does
            # not wait for the answer; leaving at once would cancel that POST (and race
            # it with the DELETE). Wait for it, as any client that goes on to work does.
            # (At 2026-07-28 there is no such notification: nothing to wait for.)
            if wire.session_id() is not None:
                with anyio.move_on_after(TIMEOUT):
                    await wire.initialized_answered.wait()
        emit(**observed, sessionId=wire.session_id(), exchanges=wire.exchanges)


async def list_tools(url):
    wire = Wire()
    mcp, http = client(url, wire)
    async with http:
        async with mcp as connected:
            pages = await list_pages(connected)
        emit(pages=pages, sessionId=wire.session_id(), exchanges=wire.exchanges)


async def call(url, calls, mode, feedback):
    wire = Wire()
    elicitations = Elicitations(mode, feedback) if mode != "none" else None
    mcp, http = client(url, wire, elicitation=elicitations)
    results = []
    async with http:
        async with mcp as connected:
            for name, arguments in calls:
                try:
                    results.append(result_of(await connected.call_tool(name, arguments)))
                except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
                    results.append(error_of(exc))
        emit(
            results=results,
            elicitations=elicitations.asked if elicitations else [],
            declared=wire.declared,
            sessionId=wire.session_id(),
            exchanges=wire.exchanges,
        )


async def reload(url):
    wire = Wire()
    notifications = []
    wanted = {"notifications/tools/list_changed", "notifications/resources/list_changed"}
    seen = set()
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, Exception):
            notifications.append({"exception": repr(message)})
            return
        method = getattr(message, "method", None)
        notifications.append({"method": method})
        if method in wanted:
            seen.add(method)
            if seen == wanted:
                changed.set()

    mcp, http = client(url, wire, message_handler=on_message)
    async with http:
        async with mcp as connected:
            before = await list_pages(connected)
            resources_before = await resource_pages(connected)
            with anyio.move_on_after(TIMEOUT):
                await wire.get_stream_open.wait()
            # The test changes the plugins folder only after this line.
            print("ready", flush=True)
            with anyio.move_on_after(TIMEOUT):
                await changed.wait()
            after = await list_pages(connected)
            resources_after = await resource_pages(connected)
        emit(
            before=before,
            after=after,
            resourcesBefore=resources_before,
            resourcesAfter=resources_after,
            notified=changed.is_set(),
            notifications=notifications,
            sessionId=wire.session_id(),
            exchanges=wire.exchanges,
        )


async def parallel(url, count):
    async def one(index):
        wire = Wire()
        mcp, http = client(url, wire)
        async with http:
            try:
                async with mcp as connected:
                    result = await connected.call_tool(
                        "convert_units", {"value": index + 1, "from": "km", "to": "m"}
                    )
                    return {"sessionId": wire.session_id(), "value": index + 1, "result": result_of(result)}
            except Exception as exc:  # noqa: BLE001
                return {"sessionId": wire.session_id(), "value": index + 1, "callError": error_of(exc)}

    results = await asyncio.gather(*(one(i) for i in range(count)))
    emit(clients=results)


async def rounds(url, tool, arguments, plan, other_arguments):
    wire = Wire()
    mcp, http = client(url, wire, elicitation=Elicitations("accept", None))
    steps = []
    async with http:
        async with mcp as connected:
            session = connected.session
            first = await session.call_tool(tool, arguments, allow_input_required=True)
            observed_first = dump(first)
            key = next(iter(first.input_requests))
            accept = {key: types.ElicitResult(action="accept", content={"approve": True})}
            for step in plan.split(","):
                kwargs = {"input_responses": accept, "request_state": first.request_state}
                name, args = tool, arguments
                if step == "wrongkey":
                    kwargs["input_responses"] = {"not-" + key: accept[key]}
                elif step == "tamper":
                    state = first.request_state
                    kwargs["request_state"] = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
                elif step == "noanswer":
                    kwargs["input_responses"] = None
                elif step == "otherargs":
                    args = other_arguments
                elif step == "othertool":
                    name, args = "convert_units", {"value": 1, "from": "km", "to": "m"}
                elif step == "late":
                    # Past a deadline of tools.approval_timeout_ms (the test sets 1 s).
                    await anyio.sleep(2.5)
                elif step == "fresh":
                    again = await session.call_tool(tool, arguments, allow_input_required=True)
                    fresh_key = next(iter(again.input_requests))
                    kwargs = {
                        "input_responses": {fresh_key: accept[key]},
                        "request_state": again.request_state,
                    }
                try:
                    answered = await session.call_tool(name, args, allow_input_required=True, **kwargs)
                    if isinstance(answered, types.CallToolResult):
                        steps.append({"step": step, **result_of(answered)})
                    else:
                        steps.append({"step": step, "inputRequired": dump(answered)})
                except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
                    steps.append({"step": step, **error_of(exc)})
        emit(first=observed_first, steps=steps, exchanges=wire.exchanges)


async def listen(url):
    wire = Wire()
    mcp, http = client(url, wire)
    events = []
    async with http:
        async with mcp as connected:
            before = await list_pages(connected)
            resources_before = await resource_pages(connected)
            async with connected.listen(
                tools_list_changed=True,
                resources_list_changed=True,
                prompts_list_changed=True,
                resource_subscriptions=["agora://protocols/" + "0" * 40],
            ) as subscription:
                honored = dump(subscription.honored)
                # The test changes the plugins folder only after this line.
                print("ready", flush=True)
                with anyio.move_on_after(TIMEOUT):
                    async for event in subscription:
                        events.append(type(event).__name__)
                        if {"ToolsListChanged", "ResourcesListChanged", "PromptsListChanged"} <= set(events):
                            break
            after = await list_pages(connected)
            resources_after = await resource_pages(connected)
            version = connected.protocol_version
        emit(
            protocolVersion=version,
            honored=honored,
            events=events,
            before=before,
            after=after,
            resourcesBefore=resources_before,
            resourcesAfter=resources_after,
            exchanges=wire.exchanges,
        )


async def listen_end(url):
    wire = Wire()
    mcp, http = client(url, wire)
    events = []
    ended = None
    async with http:
        async with mcp as connected:
            try:
                async with connected.listen(tools_list_changed=True) as subscription:
                    print("ready", flush=True)
                    with anyio.move_on_after(TIMEOUT):
                        async for event in subscription:
                            events.append(type(event).__name__)
                        ended = "graceful"
            except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
                ended = error_of(exc)
        emit(ended=ended, events=events, exchanges=wire.exchanges)


def command_line(argv):
    """`SCENARIO URL [ARGS] [--name value ...]`: the scenario, the URL, the
    positional arguments and the options; `--mode` sets the client's MODE."""
    scenario, url, *args = argv
    options = {}
    positional = []
    index = 0
    while index < len(args):
        if args[index].startswith("--"):
            options[args[index][2:]] = args[index + 1]
            index += 2
        else:
            positional.append(args[index])
            index += 1
    global MODE
    MODE = options.get("mode", "auto")
    return scenario, url, positional, options


async def main(argv):
    scenario, url, positional, options = command_line(argv)
    if scenario == "init":
        await init(url)
    elif scenario == "list":
        await list_tools(url)
    elif scenario == "call":
        await call(url, json.loads(positional[0]), options.get("elicit", "none"), options.get("feedback"))
    elif scenario == "reload":
        await reload(url)
    elif scenario == "resources":
        await resources(url, positional)
    elif scenario == "parallel":
        await parallel(url, int(positional[0]))
    elif scenario == "rounds":
        other = json.loads(options.get("other-args", "{}"))
        await rounds(url, positional[0], json.loads(positional[1]), positional[2], other)
    elif scenario == "listen":
        await listen(url)
    elif scenario == "listen-end":
        await listen_end(url)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
