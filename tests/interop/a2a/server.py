"""An A2A 1.0 agent served by the real a2a-sdk 1.3.0 (JSON-RPC binding), for
the e2e tests of `agora-node a2a …` (tests/e2e/a2a_client.rs).

Usage: server.py PORT REQUEST_LOG [--no-jsonrpc]

The agent:
- echoes a message's text back as a streamed artifact ("echo: " + text, one
  chunk per word) and completes;
- "what did I say first?" answers the first text of the message's context, so
  a test can tell a continued context from a new one;
- a text containing "approve" stops the task in TASK_STATE_INPUT_REQUIRED with
  the approval data part Agora Node's own A2A server uses; continuing the task
  with {approval_id, approved, feedback} completes it ("approved: …" or
  "rejected: <feedback>"); a message that answers no pending approval gets
  the same question again.

The card lists an HTTP+JSON interface first (not served) and then the
JSON-RPC one, so a client that does not pick the JSON-RPC interface fails;
with --no-jsonrpc it lists that and a JSON-RPC 0.3 interface only.

Each request is appended to REQUEST_LOG as a JSON line (path, A2A-Version
header, response content type) before its response starts, so a test can
see what the client sent and whether it was answered as a stream.
"""

import json
import sys
import uuid

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import (
    get_data_parts,
    get_message_text,
    new_data_part,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)


class EchoAgent(AgentExecutor):
    def __init__(self):
        # context id -> the user texts sent in it, in order
        self.history: dict[str, list[str]] = {}
        # task id -> the approval data part the task waits on
        self.pending: dict[str, dict] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if task.id in self.pending:
            await self.answer_approval(task.id, message, updater)
            return
        text = get_message_text(message)
        said = self.history.setdefault(task.context_id, [])
        said.append(text)
        if "approve" in text:
            self.pending[task.id] = {
                "approval_id": str(uuid.uuid4()),
                "tool_name": "delete_everything",
                "parameters": {"scope": "all"},
                "risk_level": "high",
                "description": "Deletes everything",
            }
            await self.ask(task.id, updater)
            return
        if text == "what did I say first?":
            answer = said[0]
        else:
            answer = "echo: " + text
        await updater.start_work()
        await self.stream(answer, updater)

    async def ask(self, task_id: str, updater: TaskUpdater) -> None:
        question = updater.new_agent_message(
            [
                new_text_part("May I run delete_everything?"),
                new_data_part(self.pending[task_id]),
            ]
        )
        await updater.requires_input(question)

    async def answer_approval(self, task_id, message, updater: TaskUpdater) -> None:
        approval_id = self.pending[task_id]["approval_id"]
        answers = [
            part
            for part in get_data_parts(message.parts)
            if isinstance(part, dict)
            and part.get("approval_id") == approval_id
            and isinstance(part.get("approved"), bool)
        ]
        if not answers:
            await self.ask(task_id, updater)
            return
        del self.pending[task_id]
        answer = answers[0]
        await updater.start_work()
        if answer["approved"]:
            await self.stream("approved: delete_everything ran", updater)
        else:
            await self.stream("rejected: " + str(answer.get("feedback", "")), updater)

    async def stream(self, text: str, updater: TaskUpdater) -> None:
        words = text.split(" ")
        artifact_id = str(uuid.uuid4())
        for index, word in enumerate(words):
            last = index == len(words) - 1
            await updater.add_artifact(
                [new_text_part(word if last else word + " ")],
                artifact_id=artifact_id,
                name="answer",
                append=index > 0,
                last_chunk=last,
            )
        await updater.complete(updater.new_agent_message([new_text_part(text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


class RequestLog:
    """ASGI middleware: one JSON line per request, written as its response starts."""

    def __init__(self, app, path: str):
        self.app = app
        self.path = path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked = {k.decode().lower(): v.decode() for k, v in scope["headers"]}

        async def logging_send(message):
            if message["type"] == "http.response.start":
                answered = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
                line = {
                    "path": scope["path"],
                    "a2a_version": asked.get("a2a-version"),
                    "content_type": answered.get("content-type", ""),
                }
                with open(self.path, "a") as log:
                    log.write(json.dumps(line) + "\n")
            await send(message)

        await self.app(scope, receive, logging_send)


def main() -> None:
    port = int(sys.argv[1])
    request_log = sys.argv[2]
    jsonrpc = "--no-jsonrpc" not in sys.argv[3:]
    base = f"http://127.0.0.1:{port}"
    interfaces = [AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0")]
    if jsonrpc:
        interfaces.append(AgentInterface(url=f"{base}/a2a", protocol_binding="JSONRPC", protocol_version="1.0"))
    else:
        interfaces.append(AgentInterface(url=f"{base}/a2a", protocol_binding="JSONRPC", protocol_version="0.3"))
    card = AgentCard(
        name="sdk-echo",
        description="a2a-sdk 1.3.0 echo agent for Agora Node's client tests",
        version="1.0.0",
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="echo", name="Echo", description="Echoes text back", tags=["echo"]),
            AgentSkill(
                id="approve",
                name="Approval",
                description="Asks before running a risky tool",
                tags=["approval", "test"],
            ),
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoAgent(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/a2a")
    )
    uvicorn.run(RequestLog(app, request_log), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
