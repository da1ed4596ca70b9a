"""Behaviour of plugin-sdk/bindings/python/agora_plugin.py under CPython, with
the host's functions replaced (the generated wit_world stubs only raise):
run by `cargo test -p agora-plugin-sdk`, with the bindings folder on sys.path."""

import dataclasses
import json
import unittest
from types import SimpleNamespace
from typing import Optional

import agora_plugin as sdk
from componentize_py_types import Err, Ok
from wit_world.imports import host, llm, streams, types
from wit_world.imports import wasi_http_types as http


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

    def test_model_ready_asks_about_the_provider_named_the_default_when_none(self):
        asked = []
        llm.ready = lambda provider: asked.append(provider) or provider is None
        self.assertIs(sdk.model_ready(), True)
        self.assertIs(sdk.model_ready("hosted"), False)
        self.assertEqual(asked, [None, "hosted"])

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

    def test_prompts_and_document_types_are_declared_and_rendered(self):
        declared = sdk.capabilities(
            prompts=[sdk.prompt("greet", "Greets.", [("who", "whom", True)])],
            documents={"default": "text/plain"},
        )
        self.assertEqual(
            json.loads(declared),
            {
                "prompts": [
                    {"name": "greet", "description": "Greets.", "arguments": [{"name": "who", "description": "whom", "required": True}]}
                ],
                "documents": {"default": {"mime_type": "text/plain"}},
            },
        )

        def fail(arguments):
            raise sdk.HostError("settings", "secret gone")

        renderers = {"greet": lambda arguments: [("user", f"Hi {arguments['who']}"), ("assistant", "Hello")], "fail": fail}
        self.assertEqual(
            json.loads(sdk.dispatch_prompt("greet", '{"who": "Ada"}', renderers)),
            {"messages": [{"role": "user", "text": "Hi Ada"}, {"role": "assistant", "text": "Hello"}]},
        )
        for name, error in [("fail", "secret gone"), ("other", 'no prompt named "other"')]:
            with self.assertRaises(Err) as caught:
                sdk.dispatch_prompt(name, "{}", renderers)
            self.assertEqual(caught.exception.value, error)
        with self.assertRaises(Err):
            sdk.NoPrompts().get("greet", "{}")


class OutgoingHttp(unittest.TestCase):
    """`http_request` over a stand-in of wasi:http that answers as the node does."""

    def setUp(self):
        self.modules = sdk._http_modules

    def tearDown(self):
        sdk._http_modules = self.modules

    def wasi_http(self, answer, *, refused_at_handle=None):
        """Install a wasi:http whose requests get `answer`: `(status, headers, body
        pieces)` or an error-code; what was sent, and the resources released in order."""
        sent = {"body": b""}
        released = []

        class Resource:
            label = ""

            def __exit__(self, *_):
                released.append(self.label)

        class Fields(Resource):
            label = "headers"

            def __init__(self, entries):
                self.list = entries

            @classmethod
            def from_list(cls, entries):
                if any(not name or " " in name for name, _ in entries):
                    raise Err(http.HeaderError_InvalidSyntax())
                return cls(entries)

            def entries(self):
                return self.list

        class Sink(Resource):
            label = "sink"

            def blocking_write_and_flush(self, data):
                assert len(data) <= 4096, len(data)
                sent["body"] += data

        class OutgoingBody(Resource):
            label = "request body"

            def write(self):
                return Sink()

            @classmethod
            def finish(cls, this, trailers):
                released.append("request body finished")

        class OutgoingRequest(Resource):
            label = "request"

            def __init__(self, fields):
                sent["headers"] = fields.entries()

            def set_method(self, method):
                sent["method"] = method

            def set_scheme(self, scheme):
                sent["scheme"] = scheme

            def set_authority(self, authority):
                sent["authority"] = authority

            def set_path_with_query(self, path):
                sent["path"] = path

            def body(self):
                return OutgoingBody()

        class Stream(Resource):
            label = "stream"

            def __init__(self, pieces):
                self.pieces = list(pieces)

            def blocking_read(self, _most):
                if not self.pieces:
                    raise Err(streams.StreamError_Closed())
                piece = self.pieces.pop(0)
                if isinstance(piece, Exception):
                    raise piece
                return piece

        class IncomingBody(Resource):
            label = "answer body"

            def __init__(self, pieces):
                self.pieces = pieces

            def stream(self):
                return Stream(self.pieces)

            @classmethod
            def finish(cls, this):
                trailers = Resource()
                trailers.label = "trailers"
                return trailers

        class Response(Resource):
            label = "response"

            def status(self):
                return answer[0]

            def headers(self):
                return Fields(answer[1])

            def consume(self):
                return IncomingBody(answer[2])

        class Pollable(Resource):
            label = "pollable"

            def block(self):
                pass

        class Future(Resource):
            label = "future"
            waited = False

            def subscribe(self):
                self.waited = True
                return Pollable()

            def get(self):
                if not self.waited:
                    return None
                return Ok(Ok(Response())) if isinstance(answer, tuple) else Ok(Err(answer))

        def handle(request, options):
            if refused_at_handle is not None:
                raise Err(refused_at_handle)
            return Future()

        names = {name: getattr(http, name) for name in dir(http) if not name.startswith("_")}
        fake = SimpleNamespace(**names)
        fake.Fields, fake.OutgoingRequest, fake.OutgoingBody, fake.IncomingBody = (
            Fields,
            OutgoingRequest,
            OutgoingBody,
            IncomingBody,
        )
        sdk._http_modules = (SimpleNamespace(handle=handle), streams, fake)
        return sent, released

    def refusal(self, call):
        with self.assertRaises(sdk.HostError) as caught:
            call()
        return caught.exception

    def test_a_get_is_sent_as_the_url_says_and_its_answer_read_whole(self):
        headers = [("Content-Type", b"application/json"), ("Set-Cookie", b"a"), ("Set-Cookie", b"b")]
        sent, released = self.wasi_http((200, headers, [b'{"items": ', b"[1, 2]}"]))
        response = sdk.http_get("https://api.example.org/v1/items?q=1#top", {"Accept": "application/json"})
        self.assertEqual(response.status, 200)
        self.assertEqual(response.json(), {"items": [1, 2]})
        self.assertEqual(response.header("content-TYPE"), "application/json")
        self.assertEqual([v for k, v in response.headers if k == "set-cookie"], ["a", "b"])
        self.assertEqual(
            (sent["method"], sent["scheme"], sent["authority"], sent["path"], sent["headers"]),
            (http.Method_Get(), http.Scheme_Https(), "api.example.org", "/v1/items?q=1", [("Accept", b"application/json")]),
        )
        # Children before their parents: a parent released first traps the plugin.
        self.assertLess(released.index("sink"), released.index("request body finished"))
        self.assertLess(released.index("headers"), released.index("response"))
        self.assertLess(released.index("stream"), released.index("trailers"))
        self.assertIn("future", released)

    def test_a_body_is_written_in_pieces_the_stream_takes(self):
        sent, _ = self.wasi_http((201, [], [b"made"]))
        data = bytes(range(256)) * 40
        response = sdk.http_request("post", "http://127.0.0.1:8080", body=data)
        self.assertEqual((response.status, response.text()), (201, "made"))
        self.assertEqual((sent["method"], sent["path"], sent["body"]), (http.Method_Post(), "/", data))
        sent, _ = self.wasi_http((200, [], []))
        sdk.http_request("PROPFIND", "http://h/x", body="é")
        self.assertEqual((sent["method"], sent["body"]), (http.Method_Other("PROPFIND"), "é".encode()))

    def test_a_status_is_an_answer_not_an_error(self):
        self.wasi_http((404, [], [b"no such thing"]))
        response = sdk.http_get("http://h/missing")
        self.assertEqual((response.status, response.text()), (404, "no such thing"))
        with self.assertRaises(sdk.HostError) as caught:
            response.json()
        self.assertEqual(caught.exception.kind, "invalid-data")

    def test_the_nodes_refusal_is_outbound_refused_in_its_words(self):
        words = "HTTP request denied: http://127.0.0.1:9 is not in the allowed_hosts of plugin p's capabilities"
        self.wasi_http(http.ErrorCode_InternalError(words))
        error = self.refusal(lambda: sdk.http_get("http://127.0.0.1:9/feed"))
        self.assertEqual((error.kind, error.message), ("outbound-refused", words))
        self.wasi_http(None, refused_at_handle=http.ErrorCode_HttpRequestUriInvalid())
        error = self.refusal(lambda: sdk.http_get("http://h/"))
        self.assertEqual((error.kind, error.message), ("outbound-refused", "GET http://h/ refused: http-request-uri-invalid"))

    def test_failures_on_the_way_are_outbound_failed_naming_the_request(self):
        for code, words in [
            (http.ErrorCode_ConnectionRefused(), "connection-refused"),
            (http.ErrorCode_HttpResponseTimeout(), "http-response-timeout"),
            (http.ErrorCode_HttpResponseBodySize(100), "http-response-body-size (100)"),
            (http.ErrorCode_InternalError("broken pipe"), "broken pipe"),
        ]:
            self.wasi_http(code)
            error = self.refusal(lambda: sdk.http_get("http://127.0.0.1:9/x"))
            self.assertEqual((error.kind, error.message), ("outbound-failed", f"GET http://127.0.0.1:9/x failed: {words}"))
        broken = SimpleNamespace(to_debug_string=lambda: "reset by peer")
        self.wasi_http((200, [], [b"part", Err(streams.StreamError_LastOperationFailed(broken))]))
        error = self.refusal(lambda: sdk.http_get("http://h/"))
        self.assertEqual(error.kind, "outbound-failed")
        self.assertIn("reset by peer", error.message)

    def test_what_is_never_sent(self):
        self.wasi_http((200, [], []))
        for url in ["ftp://h/x", "not a url", "http:///path"]:
            error = self.refusal(lambda: sdk.http_get(url))
            self.assertEqual(error.kind, "outbound-refused", url)
            self.assertIn(url, error.message)
        error = self.refusal(lambda: sdk.http_get("http://h/", {"bad name": "x"}))
        self.assertEqual(error.kind, "outbound-refused")
        sdk._http_modules = None
        error = self.refusal(lambda: sdk.http_get("http://h/"))
        self.assertEqual(error.kind, "outbound-refused")
        self.assertIn("-w agent-http", error.message)


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
