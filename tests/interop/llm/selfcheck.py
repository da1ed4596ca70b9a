"""Drives a running standin_server.py with the real openai client and checks each scripted
behaviour as that client sees it.

Usage: selfcheck.py PORT [KEY]      (start the server with --key KEY to check the 401)
Prints one line per check and `N passed, M failed` last; exits 1 if any failed.
"""

import json
import sys
import time
import urllib.request

import openai

PORT = int(sys.argv[1])
KEY = sys.argv[2] if len(sys.argv) > 2 else None
BASE = f"http://127.0.0.1:{PORT}"
# No retries: a 429 or 500 must surface as such, not be retried away.
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY or "x", max_retries=0, timeout=10)
MODEL = "standin"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
results: list[tuple[str, bool | None, str]] = []  # ok None: skipped


class Skip(Exception):
    pass


def check(name):
    def run(fn):
        try:
            note = fn() or ""
            results.append((name, True, note))
        except Skip as why:
            results.append((name, None, str(why)))
        except Exception as error:  # a failed check reports, the others still run
            results.append((name, False, f"{type(error).__name__}: {error}"))
        ok, note = results[-1][1:]
        print(f"{ {True: 'PASS', False: 'FAIL', None: 'SKIP'}[ok]} {name}{': ' + note if note else ''}", flush=True)
    return run


def user(text):
    return [{"role": "user", "content": text}]


def expect(error_type, fn):
    try:
        fn()
    except error_type as error:
        return f"{type(error).__name__} ({getattr(error, 'status_code', '-')})"
    raise AssertionError(f"no {error_type.__name__}")


def http(method, path):
    request = urllib.request.Request(BASE + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def streamed(messages, **kw):
    """The content text, finish_reason, and usage chunk of one streamed answer."""
    text, finish, usage = "", None, None
    for chunk in client.chat.completions.create(model=MODEL, messages=messages, stream=True, **kw):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    return text, finish, usage


http("POST", "/checks/reset")


@check("echo, streamed word by word")
def _():
    chunks = list(client.chat.completions.create(model=MODEL, messages=user("hello there"), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: hello there", repr(text)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "stop"
    assert len(chunks) == 6, f"{len(chunks)} chunks"  # role, 4 words, finish


@check("echo, not streamed")
def _():
    done = client.chat.completions.create(model=MODEL, messages=user("hello there"))
    assert done.choices[0].message.content == "You said: hello there", done
    assert done.choices[0].finish_reason == "stop" and done.usage.completion_tokens == 4, done


@check("echo of content parts")
def _():
    parts = [{"type": "text", "text": "hello"}, {"type": "text", "text": " parts"}]
    assert streamed([{"role": "user", "content": parts}])[0] == "You said: hello parts"


@check("tool call, streamed in fragments and assembled")
def _():
    args = '{"city": "Paris, France"}'
    name, assembled, ids, fragments, finish = None, "", set(), 0, None
    for chunk in client.chat.completions.create(model=MODEL, messages=user(f"weather? [tool get_weather {args}]"),
                                                tools=TOOLS, stream=True):
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for call in choice.delta.tool_calls or []:
            assert call.index == 0
            ids.add(call.id) if call.id else None
            name = (call.function.name or name) if call.function else name
            if call.function and call.function.arguments:
                assembled += call.function.arguments
                fragments += 1
    assert (name, assembled, finish) == ("get_weather", args, "tool_calls"), (name, assembled, finish)
    assert fragments >= 3 and len(ids) == 1 and next(iter(ids)).startswith("call_"), (fragments, ids)
    return f"{fragments} argument fragments"


@check("tool call, not streamed")
def _():
    done = client.chat.completions.create(model=MODEL, messages=user('[tool get_weather {"city": "Oslo"}]'), tools=TOOLS)
    call = done.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Oslo"}'), call
    assert done.choices[0].finish_reason == "tool_calls"


@check("tool not offered")
def _():
    assert streamed(user('[tool nope {"a": 1}]'), tools=TOOLS)[0] == "no such tool: nope"


@check("tool result answered")
def _():
    messages = user("weather?") + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    assert streamed(messages, tools=TOOLS)[:2] == ("Tool result: sunny, 21 C", "stop")


@check("[error 500] -> InternalServerError")
def _():
    return expect(openai.InternalServerError, lambda: streamed(user("[error 500]")))


@check("[error 429] -> RateLimitError, Retry-After: 1")
def _():
    try:
        client.chat.completions.create(model=MODEL, messages=user("[error 429]"))
    except openai.RateLimitError as error:
        assert error.response.headers.get("retry-after") == "1", error.response.headers
        assert error.body == {"message": "stand-in error 429", "type": "server_error", "code": None}, error.body
        return "RateLimitError (429)"
    raise AssertionError("no RateLimitError")


@check("bad key -> AuthenticationError")
def _():
    if KEY is None:
        raise Skip("no KEY given (start the server with --key KEY and pass KEY here)")
    bad = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY + "-wrong", max_retries=0)
    note = expect(openai.AuthenticationError, lambda: bad.chat.completions.create(model=MODEL, messages=user("hi")))
    refused = http("GET", "/checks")["refused"]
    assert refused and refused[-1]["status"] == 401, refused
    return note


@check("bad request body -> BadRequestError, recorded as refused")
def _():
    notes = []
    for bad in [dict(messages=[{"role": "bogus", "content": "x"}]), dict(messages=[]),
                dict(messages=user("x"), extra_body={"max_tokens": "5"}),
                dict(messages=user("x"), extra_body={"stream_option": {}})]:
        notes.append(expect(openai.BadRequestError, lambda: client.chat.completions.create(model=MODEL, **bad)))
    refused = http("GET", "/checks")["refused"][-4:]
    assert all(r["status"] == 400 for r in refused), refused
    return " | ".join(r["reason"] for r in refused)


@check("[drop] -> an error, or the stream ends without a finish")
def _():
    try:
        text, finish, _ = streamed(user("[drop] one two three"))
    except openai.APIError as error:
        return f"raised {type(error).__name__}: {error}"
    assert finish is None, finish
    return f"ended without finish after {text!r}"


@check("[garbage] -> the client fails to parse")
def _():
    try:
        streamed(user("[garbage]"))
    except (ValueError, openai.APIError) as error:
        return f"raised {type(error).__name__}"
    raise AssertionError("no error")


@check("[stall] -> APITimeoutError with a 2 s timeout")
def _():
    started = time.monotonic()
    note = expect(openai.APITimeoutError, lambda: streamed(user("[stall]"), timeout=2))
    return f"{note} after {time.monotonic() - started:.1f} s"


@check("[slow 500] waits, then answers")
def _():
    started = time.monotonic()
    text = streamed(user("[slow 500] hi"))[0]
    elapsed = time.monotonic() - started
    assert text == "You said: [slow 500] hi" and elapsed >= 0.5, (text, elapsed)


@check("include_usage -> a usage chunk")
def _():
    text, finish, usage = streamed(user("count these words"), stream_options={"include_usage": True})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3, 5, 8), usage
    assert streamed(user("no usage asked"))[2] is None


@check("GET /v1/models")
def _():
    assert [m.id for m in client.models.list()] == ["standin"]


@check("/checks records accepted bodies, /checks/reset clears")
def _():
    seen = http("GET", "/checks")["accepted"]
    assert seen and all(a["authorization"] for a in seen), seen
    assert seen[0]["body"]["messages"] == user("hello there") and seen[0]["body"]["stream"] is True, seen[0]
    http("POST", "/checks/reset")
    assert http("GET", "/checks") == {"accepted": [], "refused": []}
    return f"{len(seen)} accepted"


passed, failed, skipped = (sum(ok is want for _, ok, _ in results) for want in (True, False, None))
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed else 0)
