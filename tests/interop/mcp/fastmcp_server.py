"""An MCP server of the real mcp 2.3.0 SDK (MCPServer, once FastMCP) over
Streamable HTTP, for the node as an MCP client (tests/e2e/mcp_client.rs).

Usage: fastmcp_server.py PORT CALL_LOG [--token TOKEN] [--json]

With --json, answers are single application/json bodies instead of event streams.

Tools, by their annotations (text results are unstructured: the SDK would
otherwise also send a str result as structuredContent {"result": …}):
- lookup(term)              readOnlyHint          -> text "<term>: found" (unstructured)
- inventory(shelf)          readOnlyHint          -> structuredContent {"shelf", "items": 3}
- annotate(record, note)    destructiveHint=false -> text
- purge(record)             destructiveHint=true  -> text
- unannotated(record)       no annotations        -> text
- broken(reason)            readOnlyHint          -> a ToolError: isError with the reason
- confirm(record)           readOnlyHint          -> asks the client through elicitation and
                                                     says what came of it
- secret()                  readOnlyHint          -> (not on the node's allow-list in the tests)

tools/list comes in pages of three (nextCursor); each page asked is logged
({"list": first index}).

Every tools/call that reaches a tool is appended to CALL_LOG as a JSON line
({"tool", "arguments"}) before the tool answers, so a test can tell whether
the node called it at all. Every HTTP request is logged too
({"http": method, "authorization": header or null}), and with --token a
request to /mcp without "Authorization: Bearer TOKEN" gets HTTP 401.
"""

import argparse
import json

import uvicorn
from pydantic import BaseModel

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListToolsResult, ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("log")
parser.add_argument("--token", default="")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()


def record(entry: dict) -> None:
    with open(args.log, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def called(tool: str, **arguments) -> None:
    record({"tool": tool, "arguments": arguments})


PAGE_SIZE = 3


class PagedServer(MCPServer):
    """MCPServer lists every tool at once; this one pages tools/list by three,
    so a client must follow nextCursor to see them all."""

    async def _handle_list_tools(self, ctx, params):
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE_SIZE
        next_cursor = str(end) if end < len(tools) else None
        record({"list": start})
        return ListToolsResult(tools=tools[start:end], next_cursor=next_cursor)


server = PagedServer("fixture-remote")
READS = ToolAnnotations(read_only_hint=True)


@server.tool(description="Looks a term up", annotations=READS, structured_output=False)
def lookup(term: str) -> str:
    called("lookup", term=term)
    return f"{term}: found"


class Shelf(BaseModel):
    shelf: str
    items: int


@server.tool(description="Counts what is on a shelf", annotations=READS)
def inventory(shelf: str) -> Shelf:
    called("inventory", shelf=shelf)
    return Shelf(shelf=shelf, items=3)


@server.tool(
    description="Adds a note to a record",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    structured_output=False,
)
def annotate(record: str, note: str) -> str:
    called("annotate", record=record, note=note)
    return f"noted on {record}"


@server.tool(
    description="Deletes a record",
    annotations=ToolAnnotations(destructive_hint=True),
    structured_output=False,
)
def purge(record: str) -> str:
    called("purge", record=record)
    return f"{record} purged"


@server.tool(description="Changes a record, saying nothing about how", structured_output=False)
def unannotated(record: str) -> str:
    called("unannotated", record=record)
    return f"{record} changed"


@server.tool(description="Always fails", annotations=READS)
def broken(reason: str) -> str:
    called("broken", reason=reason)
    raise ToolError(f"broken on purpose: {reason}")


class Confirmation(BaseModel):
    sure: bool


@server.tool(description="Asks the client's human first", annotations=READS, structured_output=False)
async def confirm(record: str, ctx: Context) -> str:
    called("confirm", record=record)
    try:
        answer = await ctx.elicit(f"Really {record}?", Confirmation)
    except Exception as error:  # the client refused to elicit
        return f"elicitation refused: {error}"
    return f"elicitation answered: {answer.action}"


@server.tool(description="Not for the node", annotations=READS)
def secret() -> str:
    called("secret")
    return "the secret"


def guarded(app, token: str):
    """The MCP app behind a log of every request and, with a token, a bearer check."""

    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            authorization = headers.get(b"authorization")
            authorization = authorization.decode() if authorization is not None else None
            record({"http": scope["method"], "authorization": authorization})
            if token and authorization != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
                return
        await app(scope, receive, send)

    return asgi


app = guarded(server.streamable_http_app(streamable_http_path="/mcp", json_response=args.json), args.token)
uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
