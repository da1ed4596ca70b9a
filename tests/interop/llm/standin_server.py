"""A local stand-in for an OpenAI-compatible chat-completions server that checks every
request with the openai package's own request types, and checks everything it sends
with the package's own response types, so it can never answer what a real server wouldn't.

Usage: standin_server.py PORT [--key KEY]        (openai 3.51.0, see requirements.txt)
  POST /v1/chat/completions  a body refused (400) unless it validates as the package's
                             CompletionCreateParamsStreaming / ...NonStreaming (strictly:
                             no unknown fields, no coercions) with a non-empty model and
                             messages; with --key, 401 unless `Authorization: Bearer KEY`.
                             The reply is scripted by the last message:
      role "tool"             -> text "Tool result: <its content>", finish "stop"
      else in the last user message's text:
      [tool NAME ARGS_JSON]   -> one call of function NAME (if offered in `tools`) with
                                 ARGS_JSON verbatim, streamed in >= 3 argument fragments
      [error STATUS]          -> HTTP STATUS with an OpenAI error body (429: Retry-After: 1)
      [slow MS]               -> wait MS ms before the first byte, then answer as usual
      [stall]                 -> the role chunk, then silence until the client goes away
      [drop]                  -> the role chunk and two content chunks, then the connection
                                 is closed with no final chunk and no [DONE]
      [garbage]               -> one valid chunk, `data: {not json`, `data: [DONE]`
      otherwise               -> text "You said: <the user text>", one chunk per word
  GET  /v1/models            one model, "standin".
  GET  /checks               {"accepted": [{"body", "authorization"}], "refused":
                             [{"status", "reason", "body"}]} for the test to inspect.
  POST /checks/reset         empties both lists.
Prints {"event": "ready", "port": PORT} once listening.
"""

import argparse
import asyncio
import collections.abc
import itertools
import json
import re
import time

import pydantic
from aiohttp import web
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

# The package's TypedDicts ignore unknown keys and coerce ("5" -> 5) by default; a real
# server refuses both. The config set here reaches every nested TypedDict without its own.
STRICT = pydantic.ConfigDict(extra="forbid", strict=True)


@pydantic.with_config(STRICT)
class StrictStreaming(CompletionCreateParamsStreaming):
    pass


@pydantic.with_config(STRICT)
class StrictNonStreaming(CompletionCreateParamsNonStreaming):
    pass


STREAMING = pydantic.TypeAdapter(StrictStreaming)
NON_STREAMING = pydantic.TypeAdapter(StrictNonStreaming)

TOOL = re.compile(r"\[tool (\S+) (\{.*\})\]", re.DOTALL)
ERROR = re.compile(r"\[error (\d{3})\]")
SLOW = re.compile(r"\[slow (\d+)\]")

KEY: str | None = None
ids = itertools.count(1)
accepted: list[dict] = []
refused: list[dict] = []


# ---- request checking ----------------------------------------------------------------

def describe(error: pydantic.ValidationError, prefix: str = "") -> str:
    """The first few problems. A message (or content part) is tried against every member
    of a union; the members whose `role`/`type` tag did not match are noise, so their
    errors are dropped, unless no member matched, which is then the problem to name."""
    errors = error.errors()
    tags = [e for e in errors if e["type"] == "literal_error" and e["loc"][-1] in ("role", "type")]
    wrong = {e["loc"][:-1] for e in tags}
    shown = [e for e in errors if not any(e["loc"][:len(w)] == w for w in wrong)]
    if not shown:  # loc (..., index, MemberName, "role") -> (..., index, "role")
        expected = ", ".join(dict.fromkeys(e["ctx"]["expected"] for e in tags))
        shown = [{"loc": tags[0]["loc"][:-2] + tags[0]["loc"][-1:], "msg": f"Input should be one of {expected}"}]
    path = lambda loc: prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    return "; ".join(f"{path(e['loc']).lstrip('.') or 'body'}: {e['msg']}" for e in shown[:3])


def materialize(value: object, path: str = "") -> object:
    """pydantic validates `Iterable[...]` fields (messages, tools, content parts) lazily,
    only when iterated: walking them here is what actually checks every item."""
    if isinstance(value, dict):
        return {k: materialize(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (str, bytes)) or not isinstance(value, collections.abc.Iterable):
        return value
    items = []
    try:
        for item in value:
            items.append(materialize(item, f"{path}[{len(items)}]"))
    except pydantic.ValidationError as error:  # its locations start at the item index
        raise ValueError(describe(error, path)) from None
    return items


def validate(body: object) -> dict:
    """The body as the package's types read it; ValueError naming the first problems."""
    if not isinstance(body, dict):
        raise ValueError("body is not a JSON object")
    adapter = STREAMING if body.get("stream") is True else NON_STREAMING
    try:
        parsed = materialize(adapter.validate_python(body))
    except pydantic.ValidationError as error:
        raise ValueError(describe(error)) from None
    if not parsed["model"]:
        raise ValueError("model: must not be empty")
    if not parsed["messages"]:
        raise ValueError("messages: must not be empty")
    return parsed


def error_body(message: str, kind: str, code: str | None) -> dict:
    return {"error": {"message": message, "type": kind, "code": code}}


def refuse(status: int, reason: str, body: object, code: str | None = None) -> web.Response:
    refused.append({"status": status, "reason": reason, "body": body})
    return web.json_response(error_body(reason, "invalid_request_error", code), status=status)


@web.middleware
async def authorize(request: web.Request, handler):
    if KEY is not None and request.path.startswith("/v1/") \
            and request.headers.get("Authorization") != f"Bearer {KEY}":
        return refuse(401, "Incorrect API key provided", None, "invalid_api_key")
    return await handler(request)


# ---- what to answer ------------------------------------------------------------------

def text_of(content: object) -> str:
    """A message's text: a string, or the joined texts of its content parts."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def words(text: str) -> list[str]:
    """Pieces that each hold one word with the whitespace before it: joined, the text."""
    return [p for p in re.split(r"(?<=\S)(?=\s)", text) if p]


def plan(body: dict) -> dict:
    """What the last message asks for: {"text"} or {"tool", "args"}, plus the directives."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return {"text": "Tool result: " + text_of(messages[-1].get("content")), "slow": 0, "error": None, "mode": None}
    users = [m for m in messages if m["role"] == "user"]
    said = text_of(users[-1]["content"]) if users else ""
    script = {"text": "You said: " + said,
              "slow": int(m.group(1)) if (m := SLOW.search(said)) else 0,
              "error": int(m.group(1)) if (m := ERROR.search(said)) else None,
              "mode": next((d for d in ("stall", "drop", "garbage") if f"[{d}]" in said), None)}
    if m := TOOL.search(said):
        offered = {t["function"]["name"] for t in body.get("tools") or [] if t.get("type") == "function"}
        if m.group(1) in offered:
            script.update(tool=m.group(1), args=m.group(2), id=f"call_{next(ids)}")
        else:
            script["text"] = f"no such tool: {m.group(1)}"
    return script


def usage(body: dict, script: dict) -> dict:
    """Token counts as whitespace-separated words: a stand-in needs no tokenizer."""
    prompt = max(1, sum(len(text_of(m.get("content")).split()) for m in body["messages"]))
    completion = max(1, len(script["args"].split()) if "tool" in script else len(script["text"].split()))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def checked(model: type[pydantic.BaseModel], data: dict) -> bytes:
    """`data` as JSON, once the package's response type reads it without extra fields
    (its models allow extras, which would hide a misspelt field)."""
    def extras(obj: object) -> list[str]:
        if isinstance(obj, pydantic.BaseModel):
            return list(obj.model_extra or {}) + [x for v in obj.__dict__.values() for x in extras(v)]
        if isinstance(obj, list):
            return [x for v in obj for x in extras(v)]
        return []
    unknown = extras(model.model_validate(data))
    assert not unknown, f"stand-in bug: fields {unknown} are not in {model.__name__}"
    return json.dumps(data).encode()


# ---- the endpoints -------------------------------------------------------------------

async def completions(request: web.Request) -> web.StreamResponse:
    try:
        body = json.loads(await request.read())
    except ValueError as error:
        return refuse(400, f"body is not JSON: {error}", None)
    try:
        parsed = validate(body)
    except ValueError as error:
        return refuse(400, str(error), body)
    accepted.append({"body": body, "authorization": "Authorization" in request.headers})

    script = plan(parsed)
    if script["slow"]:
        await asyncio.sleep(script["slow"] / 1000)
    if status := script["error"]:
        headers = {"Retry-After": "1"} if status == 429 else None
        return web.json_response(error_body(f"stand-in error {status}", "server_error", None),
                                 status=status, headers=headers)
    if parsed.get("stream"):
        return await stream(request, parsed, script)

    if script["mode"] == "stall":
        await until_gone(request)
        return web.Response()  # to no one
    if script["mode"] == "drop":
        request.transport.close()  # not even a status line
        return web.Response()
    if script["mode"] == "garbage":
        return web.Response(body=b"{not json", content_type="application/json")
    if "tool" in script:
        call = {"id": script["id"], "type": "function", "function": {"name": script["tool"], "arguments": script["args"]}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": script["text"]}, "stop"
    completion = {"id": f"chatcmpl-standin-{next(ids)}", "object": "chat.completion", "created": int(time.time()),
                  "model": parsed["model"], "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                                         "logprobs": None}], "usage": usage(parsed, script)}
    return web.Response(body=checked(ChatCompletion, completion), content_type="application/json")


async def stream(request: web.Request, body: dict, script: dict) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    base = {"id": f"chatcmpl-standin-{next(ids)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body["model"]}

    async def send(delta: dict, finish: str | None = None) -> None:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        await response.write(b"data: " + checked(ChatCompletionChunk, chunk) + b"\n\n")

    await send({"role": "assistant", "content": ""})
    if script["mode"] == "stall":
        await until_gone(request)
        return response
    if script["mode"] == "garbage":
        await response.write(b"data: {not json\n\ndata: [DONE]\n\n")
        return response
    if script["mode"] == "drop":
        for piece in words(script["text"])[:2]:
            await send({"content": piece})
        # Closing the socket mid-body leaves the chunked encoding unterminated: the
        # client sees the connection end early, not a complete (if short) answer.
        request.transport.close()
        return response

    if "tool" in script:
        await send({"tool_calls": [{"index": 0, "id": script["id"], "type": "function",
                                    "function": {"name": script["tool"], "arguments": ""}}]})
        args, n = script["args"], max(3, len(script["args"]) // 8)  # >= 3 pieces, ~8 chars each
        for i in range(n):
            piece = args[i * len(args) // n:(i + 1) * len(args) // n]
            await send({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        await send({}, "tool_calls")
    else:
        for piece in words(script["text"]):
            await send({"content": piece})
        await send({}, "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        chunk = {**base, "choices": [], "usage": usage(body, script)}
        await response.write(b"data: " + checked(ChatCompletionChunk, chunk) + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def until_gone(request: web.Request) -> None:
    """Hold the request until the client closes it (aiohttp does not cancel handlers)."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(0.1)


async def models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [
        {"id": "standin", "object": "model", "created": 0, "owned_by": "tests"}]})


async def checks(_request: web.Request) -> web.Response:
    return web.json_response({"accepted": accepted, "refused": refused})


async def reset(_request: web.Request) -> web.Response:
    accepted.clear()
    refused.clear()
    return web.json_response({})


async def main(port: int) -> None:
    app = web.Application(middlewares=[authorize])
    app.add_routes([web.post("/v1/chat/completions", completions), web.get("/v1/models", models),
                    web.get("/checks", checks), web.post("/checks/reset", reset)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    # Only now is the socket bound: a test may connect as soon as it reads this line.
    print(json.dumps({"event": "ready", "port": runner.addresses[0][1]}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--key")
    args = parser.parse_args()
    KEY = args.key
    try:
        asyncio.run(main(args.port))
    except KeyboardInterrupt:
        pass
