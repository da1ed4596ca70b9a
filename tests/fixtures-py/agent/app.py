"""Test fixture: the agent world's capabilities (plugin-sdk/wit) in Python,
through the SDK's helper (plugin-sdk/bindings/python/agora_plugin.py), each
reachable by a plain Agora request over a real socket, so a test
(tests/e2e/scripting.rs) reads back what the host gave the plugin or the
HostError it raised. Built by the test with `componentize-py -w agent-http
--import-interface-name agora:node/types@0.1.0=types` (world `agent` with
wasi:http named, the node's `types` kept as `types`).

Body `{"op": …}`:
- `greet` `{text}` → `{"reply": "<greeting>: <text>"}`, the setting `greeting`
  (`config_get`), "you said" when unset;
- `get` `{key}` → `{"value": setting or null}`, or `{"error", "kind"}` of the HostError;
- `chat` `{text}` → `{"text"}` of the model's whole answer (`complete`), or
  `{"error", "kind", "model_kind"}` of the HostError;
- `ready` `{provider?}` → `{"ready": bool}` (`model_ready`);
- `tools` → `{"tools": [{"name", "risk", "parameters"}]}` (`list_tools`);
- `ticks` → `{"count": n}`, the runs of the schedule `count` so far;
- `fetch` `{url, method?, body?}` → `{"status", "body"}` of a request through
  the node's wasi:http (`http_request`), or `{"error", "kind"}` of the HostError.

Capabilities: the default model; outgoing HTTP to the origin in the setting
`fetch_origin`, when set; the prompt `py_greeting` (`who` required), its
document shown as `text/plain`; and two schedules every second: `count` adds one to
`ticks`; `unreadable` reads the setting `gone` (a secret the tests leave
unset), so its runs fail with the host's settings error.
"""

import dataclasses
import json
from typing import Optional

import wit_world
from wit_world import exports
from wit_world.imports import types

import agora_plugin

DOCUMENT = (
    "name: Python agent fixture\n"
    "description: settings, model and schedules of the agent world, in Python\n"
    "multiround: false\n"
    "---\n"
    'body: {"op": "greet" | "get" | "chat" | "ready" | "tools" | "ticks" | "fetch", …}.\n'
)

ECHO = types.Tool(
    name="py_agent_echo",
    description="Answers its text.",
    parameters=json.dumps({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    risk=types.Risk.LOW,
)


@dataclasses.dataclass
class Echo:
    text: str


def echo(arguments: Echo) -> dict:
    return {"text": arguments.text}


def model_answer(text: str) -> dict:
    request = agora_plugin.ChatRequest().system("Be brief.").user(text)
    try:
        answer = agora_plugin.complete(request)
    except agora_plugin.HostError as error:
        return {"error": error.message, "kind": error.kind, "model_kind": error.model_kind}
    return {"text": answer.text}


def fetched(url: str, method: str, body: Optional[str]) -> dict:
    try:
        response = agora_plugin.http_request(method, url, body=body)
    except agora_plugin.HostError as error:
        return {"error": error.message, "kind": error.kind}
    return {"status": response.status, "body": response.text()}


class WitWorld(wit_world.WitWorld):
    def manifest(self) -> types.Manifest:
        return agora_plugin.manifest("fixture-py-agent", "1.0.0", protocols=[DOCUMENT], tools=[ECHO])

    @agora_plugin.handler
    def handle(self, message: types.Message) -> str:
        request = agora_plugin.json_object(message.body)
        if request is None:
            raise agora_plugin.bad_request("the body must be an object")
        op, text, key = request.get("op"), str(request.get("text", "")), str(request.get("key", ""))
        if op == "greet":
            greeting = agora_plugin.config_get("greeting") or "you said"
            return json.dumps({"reply": f"{greeting}: {text}"})
        if op == "get":
            try:
                return json.dumps({"value": agora_plugin.config_get(key)})
            except agora_plugin.HostError as error:
                return json.dumps({"error": error.message, "kind": error.kind})
        if op == "chat":
            return json.dumps(model_answer(text))
        if op == "ready":
            provider = request.get("provider")
            return json.dumps({"ready": agora_plugin.model_ready(None if provider is None else str(provider))})
        if op == "tools":
            tools = [{"name": t["name"], "risk": t["risk"], "parameters": t["parameters"]} for t in agora_plugin.list_tools()]
            return json.dumps({"tools": tools})
        if op == "ticks":
            return json.dumps({"count": agora_plugin.kv_get_json("ticks") or 0})
        if op == "fetch":
            body = None if request.get("body") is None else str(request["body"])
            return json.dumps(fetched(str(request.get("url", "")), str(request.get("method", "GET")), body))
        raise agora_plugin.bad_request(f"unknown op {op!r}")

    def run_tool(self, name: str, arguments: str) -> str:
        return agora_plugin.dispatch_tool(name, arguments, {"py_agent_echo": echo})


def count() -> None:
    agora_plugin.kv_set_json("ticks", (agora_plugin.kv_get_json("ticks") or 0) + 1)


def unreadable() -> None:
    agora_plugin.config_get("gone")


class Extensions(exports.Extensions):
    def capabilities(self) -> str:
        origin = agora_plugin.config_get("fetch_origin")
        return agora_plugin.capabilities(
            llm=["default"],
            schedules={"count": "1s", "unreadable": "1s"},
            allowed_hosts=[origin] if origin else [],
            prompts=[agora_plugin.prompt("py_greeting", "Greets someone.", [("who", "whom to greet", True)])],
            documents={"default": "text/plain"},
        )

    def tick(self, name: str) -> None:
        agora_plugin.dispatch_tick(name, {"count": count, "unreadable": unreadable})


def greeting(arguments: dict[str, str]) -> list[tuple[str, str]]:
    return [("user", f"Greet {arguments['who']} in Python.")]


class Prompts(exports.Prompts):
    def get(self, name: str, arguments: str) -> str:
        return agora_plugin.dispatch_prompt(name, arguments, {"py_greeting": greeting})
