"""Behaviour of plugin-sdk/bindings/python/agora_plugin.py under CPython, with
the host's functions replaced (the generated wit_world stubs only raise):
run by `cargo test -p agora-plugin-sdk`, with the bindings folder on sys.path."""

import dataclasses
import unittest
from typing import Optional

import agora_plugin as sdk
from componentize_py_types import Err
from wit_world.imports import host, llm, types


def refuse(message):
    def call(*_args):
        raise Err(message)

    return call


@dataclasses.dataclass
class Search:
    query: str
    limit: Optional[int] = None


@dataclasses.dataclass
class Report:
    inspection_id: Optional[str]
    notes: Optional[str]
    tags: list[str] = dataclasses.field(default_factory=list)


class HostErrors(unittest.TestCase):
    def test_a_host_error_leaving_handle_is_its_typed_failure(self):
        @sdk.handler
        def handle(message: str) -> str:
            if message == "store":
                raise sdk.HostError("limit", "values are limited to 10 bytes")
            return message

        self.assertEqual(handle("hi"), "hi")
        with self.assertRaises(Err) as caught:
            handle("store")
        self.assertIs(type(caught.exception), Err)
        failure = types.Failure(kind=types.FailureKind.INTERNAL, message="values are limited to 10 bytes")
        self.assertEqual(caught.exception.value, failure)

    def test_store_refusals(self):
        host.kv_set = refuse("values are limited to 10 bytes")
        with self.assertRaises(sdk.HostError) as caught:
            sdk.kv_set_json("k", {"a": 1})
        self.assertEqual(caught.exception.kind, "limit")
        host.kv_delete = refuse("the key-value store is not available while the manifest is read")
        with self.assertRaises(sdk.HostError) as caught:
            sdk.kv_delete("k")
        self.assertEqual(caught.exception.kind, "not-allowed")
        with self.assertRaises(sdk.HostError) as caught:
            sdk.kv_set_json("k", {1, 2})
        self.assertEqual(caught.exception.kind, "invalid-data")

    def test_kv_get_json_raises_on_invalid_json_and_is_none_when_absent(self):
        stored = {"a": b'{"n": 1}', "bad": b"{nope", "raw": b"\xff"}
        host.kv_get = stored.get
        self.assertEqual(sdk.kv_get_json("a"), {"n": 1})
        self.assertIsNone(sdk.kv_get_json("missing"))
        for key in ("bad", "raw"):
            with self.assertRaises(sdk.HostError) as caught:
                sdk.kv_get_json(key)
            self.assertEqual(caught.exception.kind, "invalid-data")
            self.assertIn(f'"{key}"', str(caught.exception))

    def test_tool_errors_are_told_apart(self):
        cases = [
            ("tool t was rejected: not today", "tool-rejected", {"feedback": "not today"}),
            ("tool t was rejected", "tool-rejected", {"feedback": None}),
            ("approval of tool t timed out", "tool-timed-out", {"tool": "t"}),
            ("tool t failed: bad arguments: x", "tool-failed", {"reason": "bad arguments: x"}),
            ('no tool named "t" is loaded', "tool-refused", {}),
            ("tool u failed: boom", "tool-refused", {}),
        ]
        for message, kind, fields in cases:
            host.call_tool = refuse(message)
            with self.assertRaises(sdk.HostError) as caught:
                sdk.call_tool("t", {"q": 1})
            self.assertEqual((caught.exception.kind, str(caught.exception)), (kind, message))
            for field, value in fields.items():
                self.assertEqual(getattr(caught.exception, field), value, message)
        host.call_tool = lambda name, arguments: f"{name}:{arguments}"
        self.assertEqual(sdk.call_tool("t", {"q": 1}), 't:{"q": 1}')

    def test_emit_and_outbound_errors(self):
        for message, kind in [
            ('event kind "tool_call" is reserved for the host', "not-allowed"),
            ("events are limited to 10 bytes", "limit"),
            ("the event consumer is not keeping up", "event-not-delivered"),
        ]:
            host.emit = refuse(message)
            with self.assertRaises(sdk.HostError) as caught:
                sdk.emit("chunk", {})
            self.assertEqual(caught.exception.kind, kind, message)
        for message, kind in [
            ("host evil.example is not in outbound.allowed_hosts", "outbound-refused"),
            ("http://x did not answer within 5000 ms", "outbound-failed"),
        ]:
            host.outbound = refuse(message)
            with self.assertRaises(sdk.HostError) as caught:
                sdk.outbound(types.Transport.AGORA, "http://x", {})
            self.assertEqual(caught.exception.kind, kind, message)

    def test_history_entries_or_invalid_data(self):
        host.history = lambda: '[{"role":"user","body":{"a":1},"at":5},{"role":"agent","body":"b"}]'
        self.assertEqual(
            sdk.history(),
            [sdk.HistoryEntry("user", {"a": 1}, 5), sdk.HistoryEntry("agent", "b", 0)],
        )
        for text in ("{}", "nope", '[{"body": 1}]'):
            host.history = lambda text=text: text
            with self.assertRaises(sdk.HostError) as caught:
                sdk.history()
            self.assertEqual(caught.exception.kind, "invalid-data", text)


class AgentCapabilities(unittest.TestCase):
    def test_settings_absent_or_an_unreadable_secret(self):
        host.config_get = lambda key: {"greeting": "hey"}.get(key)
        self.assertEqual(sdk.config_get("greeting"), "hey")
        self.assertIsNone(sdk.config_get("absent"))
        host.config_get = refuse("secret gone: the environment variable PLUGIN_SECRET is not set")
        with self.assertRaises(sdk.HostError) as caught:
            sdk.config_get("gone")
        self.assertEqual(caught.exception.kind, "settings")
        self.assertIn("PLUGIN_SECRET", caught.exception.message)

    def test_the_tool_list_or_invalid_data(self):
        host.list_tools = lambda: '[{"name":"t","description":"d","parameters":{"type":"object"},"risk":"low"}]'
        self.assertEqual(sdk.list_tools(), [{"name": "t", "description": "d", "parameters": {"type": "object"}, "risk": "low"}])
        for text in ("nope", "{}", '[{"name": "t"}]'):
            host.list_tools = lambda text=text: text
            with self.assertRaises(sdk.HostError) as caught:
                sdk.list_tools()
            self.assertEqual(caught.exception.kind, "invalid-data", text)

    def test_a_chat_request_is_the_wit_record(self):
        call = llm.ToolCall(id="c1", name="t", arguments="{}")
        request = (
            sdk.ChatRequest()
            .provider("hosted")
            .system("s")
            .user("u")
            .assistant_calls("", [call])
            .tool_result("c1", "r")
            .tool("t", "d", {"type": "object"})
            .temperature(0.5)
            .max_tokens(9)
        )
        wit = request.to_wit()
        self.assertEqual(wit.provider, "hosted")
        self.assertEqual([m.role for m in wit.messages], [llm.Role.SYSTEM, llm.Role.USER, llm.Role.ASSISTANT, llm.Role.TOOL])
        self.assertEqual(wit.messages[2].tool_calls, [call])
        self.assertEqual(wit.messages[3].tool_call_id, "c1")
        self.assertEqual(wit.tools, [llm.ToolDefinition(name="t", description="d", parameters='{"type": "object"}')])
        self.assertEqual((wit.temperature, wit.max_tokens), (0.5, 9))
        self.assertIsNone(sdk.ChatRequest().to_wit().provider)

    def test_an_answer_streams_and_completes_and_errors_are_model_errors(self):
        class Stream:
            def __init__(self, items):
                self.items, self.released = list(items), False

            def next(self):
                item = self.items.pop(0)
                if isinstance(item, llm.LlmError):
                    raise Err(item)
                return item

            def __exit__(self, *_):
                self.released = True

        usage = llm.Usage(input_tokens=3, output_tokens=2)
        chunks = [
            llm.Chunk(text="Hel", tool_calls=[], finish_reason=None, usage=None),
            llm.Chunk(text="lo", tool_calls=[], finish_reason="stop", usage=usage),
            None,
        ]
        stream = Stream(chunks)
        llm.chat = lambda request: stream
        answer = sdk.complete(sdk.ChatRequest().user("hi"))
        self.assertEqual((answer.text, answer.finish_reason, answer.usage), ("Hello", "stop", usage))
        self.assertTrue(stream.released)

        broken = Stream([chunks[0], llm.LlmError(kind=llm.ErrorKind.TIMED_OUT, message="no next chunk")])
        llm.chat = lambda request: broken
        texts = []
        with self.assertRaises(sdk.HostError) as caught:
            for chunk in sdk.chat(sdk.ChatRequest().user("hi")):
                texts.append(chunk.text)
        self.assertEqual(texts, ["Hel"])
        self.assertEqual((caught.exception.kind, caught.exception.model_kind), ("model", "timed-out"))
        self.assertTrue(broken.released)

        def refused(request):
            raise Err(llm.LlmError(kind=llm.ErrorKind.NOT_CONFIGURED, message="no language model is configured"))

        llm.chat = refused
        with self.assertRaises(sdk.HostError) as caught:
            sdk.chat(sdk.ChatRequest().user("hi"))
        self.assertEqual(caught.exception.model_kind, "not-configured")
        self.assertEqual(str(caught.exception), "no language model is configured")

    def test_capabilities_and_ticks(self):
        self.assertEqual(sdk.capabilities(), "{}")
        self.assertEqual(
            sdk.capabilities(llm=["default"], schedules={"poll": "30s"}),
            '{"llm": ["default"], "schedules": [{"name": "poll", "every": "30s"}]}',
        )
        self.assertEqual(sdk.capabilities(schedules=[("a", "1s")]), '{"schedules": [{"name": "a", "every": "1s"}]}')
        self.assertEqual(
            sdk.capabilities(allowed_hosts=["https://api.example.org"]),
            '{"allowed_hosts": ["https://api.example.org"]}',
        )
        for wrong in [{"llm": "default"}, {"allowed_hosts": "https://api.example.org"}]:
            with self.assertRaises(TypeError):
                sdk.capabilities(**wrong)
        ran = []

        def fail():
            raise sdk.HostError("settings", "secret gone")

        schedules = {"poll": lambda: ran.append("poll"), "fail": fail}
        sdk.dispatch_tick("poll", schedules)
        self.assertEqual(ran, ["poll"])
        for name, error in [("fail", "secret gone"), ("other", 'no schedule named "other"')]:
            with self.assertRaises(Err) as caught:
                sdk.dispatch_tick(name, schedules)
            self.assertEqual(caught.exception.value, error)


class ToolArguments(unittest.TestCase):
    def bad(self, text, shape):
        with self.assertRaises(Err) as caught:
            sdk.tool_arguments(text, shape)
        self.assertTrue(caught.exception.value.startswith("bad arguments: "), caught.exception.value)
        return caught.exception.value

    def test_arguments_are_read_into_the_dataclass_as_serde_reads_a_struct(self):
        self.assertEqual(sdk.tool_arguments('{"query": "food", "limit": 3, "extra": 1}', Search), Search("food", 3))
        self.assertEqual(sdk.tool_arguments('["food", null]', Search), Search("food", None))
        self.assertEqual(sdk.tool_arguments("{}", Report), Report(None, None, []))
        self.assertEqual(sdk.tool_arguments('{"inspection_id": "I", "tags": ["a"]}', Report), Report("I", None, ["a"]))

    def test_arguments_of_the_wrong_shape_are_bad_arguments_naming_the_problem(self):
        self.assertIn("query must be a string", self.bad('{"query": 5}', Search))
        self.assertIn("missing field `query`", self.bad('{"limit": 1}', Search))
        self.assertIn("limit must be an integer", self.bad('{"query": "q", "limit": true}', Search))
        self.assertIn("expected 2 fields, got 1", self.bad('["food"]', Search))
        self.assertIn("expected an object", self.bad('"food"', Search))
        self.assertIn("tags[0] must be a string", self.bad('{"tags": [1]}', Report))
        self.bad("nope", Search)

    def test_dispatch_runs_the_typed_tool_and_maps_host_errors(self):
        def search(args: Search) -> dict:
            return {"found": args.query}

        def store(args: Report) -> str:
            raise sdk.HostError("limit", "values are limited to 10 bytes")

        tools = {"search": search, "store": store}
        self.assertEqual(sdk.dispatch_tool("search", '{"query": "q"}', tools), '{"found": "q"}')
        for name, text, error in [
            ("store", "{}", "values are limited to 10 bytes"),
            ("search", "{}", "bad arguments: missing field `query`"),
            ("other", "{}", "unknown tool 'other'"),
        ]:
            with self.assertRaises(Err) as caught:
                sdk.dispatch_tool(name, text, tools)
            self.assertEqual(caught.exception.value, error)


if __name__ == "__main__":
    unittest.main()
