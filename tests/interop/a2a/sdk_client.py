"""Drive agora-node's A2A server with the real a2a-sdk 1.3.0 client.

Usage: sdk_client.py SCENARIO NODE_URL [ARGS]

  card                  resolve the agent card, build a client from it, send "hello"
  send TEXT             SendMessage (non-streaming config)
  stream TEXT           SendStreamingMessage: every event, and whether the stream closed
  get                   send, then GetTask the task
  list                  tasks in two contexts; ListTasks by contextId, paged by 2
  cancel                park a task in input-required, cancel it, cancel it again
  approve [--stream]    the approval round trip, approved
  reject FEEDBACK [--stream]
                        the approval round trip, rejected with FEEDBACK
  history               "what did I say first?" in a second task of the same context
  errors                the A2A error codes as the SDK's exceptions carry them
  push-crud HOOK REFUSED
                        push notification configs: create, get, list, replace, delete, and
                        the refusals (unknown task, no url, a URL the node's policy refuses,
                        one config over the task's bound)
  push-round HOOK TOKEN the approval round trip of a task sent with a push config (token,
                        Bearer credentials); the configs the node lists for it
  push-send TEXT HOOK TOKEN
                        TEXT sent with a push config; the task as answered
  deliveries LOG COUNT  the first COUNT deliveries webhook.py logged, each body parsed
                        strictly (unknown fields refused) as the SDK's StreamResponse

Prints one JSON line of what the SDK observed (states as enum names, texts,
event order, error classes and their JSON-RPC codes); tests/e2e/a2a.rs asserts
on it. Nothing is judged here: an unexpected SDK exception is printed as
{"error": …} for the test to report.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCard,
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import Parse
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP

REPORT = "generate the report for INS-2024-001"
# Generous: a liveness bound for a debug node on a loaded 2-core machine, not a speed target.
TIMEOUT = 60.0


def emit(**observed):
    print(json.dumps(observed), flush=True)


def error_of(exc):
    """An SDK exception as the test sees it: its class and the JSON-RPC code that class maps to."""
    return {
        "error": type(exc).__name__,
        "code": JSON_RPC_ERROR_CODE_MAP.get(type(exc)),
        "message": str(exc),
    }


def user_message(text=None, data=None, task_id=None, context_id=None):
    part = {"text": text} if data is None else {"data": data}
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[ParseDict(part, Part())],
    )
    if task_id:
        message.task_id = task_id
    if context_id:
        message.context_id = context_id
    return message


def texts(parts):
    return [p.text for p in parts if p.WhichOneof("content") == "text"]


def datas(parts):
    return [MessageToDict(p)["data"] for p in parts if p.WhichOneof("content") == "data"]


def summary(task: Task):
    status_message = task.status.message
    return {
        "id": task.id,
        "contextId": task.context_id,
        "state": TaskState.Name(task.status.state),
        "timestamp": MessageToDict(task.status).get("timestamp"),
        "statusRole": Role.Name(status_message.role),
        "statusTexts": texts(status_message.parts),
        "statusData": datas(status_message.parts),
        "artifacts": [
            {"artifactId": a.artifact_id, "name": a.name, "text": "".join(texts(a.parts))}
            for a in task.artifacts
        ],
        "answer": "".join("".join(texts(a.parts)) for a in task.artifacts),
        "historyRoles": [Role.Name(m.role) for m in task.history],
    }


def event_summary(event):
    kind = event.WhichOneof("payload")
    if kind == "task":
        return {"kind": "task", **summary(event.task)}
    if kind == "status_update":
        update = event.status_update
        return {
            "kind": "status",
            "taskId": update.task_id,
            "contextId": update.context_id,
            "state": TaskState.Name(update.status.state),
            "statusTexts": texts(update.status.message.parts),
            "statusData": datas(update.status.message.parts),
        }
    if kind == "artifact_update":
        update = event.artifact_update
        return {
            "kind": "artifact",
            "taskId": update.task_id,
            "contextId": update.context_id,
            "artifactId": update.artifact.artifact_id,
            "name": update.artifact.name,
            "append": update.append,
            "lastChunk": update.last_chunk,
            "text": "".join(texts(update.artifact.parts)),
        }
    return {"kind": kind or "empty"}


class Node:
    """One node: its card, and a non-streaming and a streaming client built from it."""

    def __init__(self, url):
        self.url = url
        self.http = httpx.AsyncClient(timeout=TIMEOUT)
        self.card: AgentCard | None = None
        self.plain = None
        self.streaming = None

    async def __aenter__(self):
        self.card = await A2ACardResolver(self.http, self.url).get_agent_card()
        # The factory adds `A2A-Version: 1.0` to the shared httpx client, as to its own.
        self.plain = ClientFactory(ClientConfig(streaming=False, httpx_client=self.http)).create(self.card)
        self.streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=self.http)).create(self.card)
        return self

    async def __aexit__(self, *exc):
        await self.http.aclose()

    def endpoint(self):
        return self.card.supported_interfaces[0].url

    async def send(self, message, context=None):
        """SendMessage; the task it answers with."""
        responses = [
            r async for r in self.plain.send_message(SendMessageRequest(message=message), context=context)
        ]
        assert len(responses) == 1 and responses[0].HasField("task"), responses
        return responses[0].task

    async def stream(self, message):
        """SendStreamingMessage: every event in order, and whether the node closed the stream."""
        events = []

        async def read():
            async for event in self.streaming.send_message(SendMessageRequest(message=message)):
                events.append(event_summary(event))

        try:
            await asyncio.wait_for(read(), TIMEOUT)
            closed = True
        except asyncio.TimeoutError:
            closed = False
        return events, closed

    async def get(self, task_id, context=None):
        return await self.plain.get_task(GetTaskRequest(id=task_id), context=context)

    async def cancel(self, task_id):
        return await self.plain.cancel_task(CancelTaskRequest(id=task_id))

    async def list(self, **params):
        response = await self.plain.list_tasks(ListTasksRequest(**params))
        return {
            "ids": [t.id for t in response.tasks],
            "contextIds": sorted({t.context_id for t in response.tasks}),
            "states": [TaskState.Name(t.status.state) for t in response.tasks],
            "nextPageToken": response.next_page_token,
            "pageSize": response.page_size,
            "totalSize": response.total_size,
        }

    async def attempt(self, call):
        """The awaited call's summary, or the SDK exception it raised."""
        try:
            result = await call
        except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
            return error_of(exc)
        return summary(result) if isinstance(result, Task) else result


async def card(node: Node):
    hello = await node.send(user_message("hello"))
    emit(card=MessageToDict(node.card), hello=summary(hello))


async def send(node: Node, text):
    emit(task=summary(await node.send(user_message(text))))


async def stream(node: Node, text):
    events, closed = await node.stream(user_message(text))
    final = summary(await node.get(events[0]["id"])) if events and events[0]["kind"] == "task" else None
    emit(events=events, closed=closed, final=final)


async def get(node: Node):
    sent = await node.send(user_message("hello, get me back"))
    emit(sent=summary(sent), got=summary(await node.get(sent.id)))


async def list_tasks(node: Node):
    first = await node.send(user_message("list one"))
    context = first.context_id
    sent = [first.id]
    for text in ["list two", "list three"]:
        sent.append((await node.send(user_message(text, context_id=context))).id)
    other = await node.send(user_message("another context"))
    everything = await node.list(context_id=context)
    page1 = await node.list(context_id=context, page_size=2)
    page2 = await node.list(context_id=context, page_size=2, page_token=page1["nextPageToken"])
    # The SDK reads a missing nextPageToken as "": the raw answer shows whether it is there.
    raw = await node.http.post(
        node.endpoint(),
        json={"jsonrpc": "2.0", "id": "raw-list", "method": "ListTasks", "params": {"contextId": context}},
    )
    raw_result = raw.json().get("result", {})
    emit(
        context=context,
        sent=sent,
        other={"id": other.id, "contextId": other.context_id},
        all=everything,
        page1=page1,
        page2=page2,
        raw_keys=sorted(raw_result.keys()),
        raw_next_page_token=raw_result.get("nextPageToken"),
    )


async def cancel(node: Node):
    parked = await node.send(user_message(REPORT))
    canceled = await node.attempt(node.cancel(parked.id))
    again = await node.attempt(node.cancel(parked.id))
    after = summary(await node.get(parked.id))
    emit(parked=summary(parked), canceled=canceled, again=again, after=after)


async def park(node: Node, streamed):
    """Ask for the report: the parked task's id, context, approval request, and what was seen."""
    if not streamed:
        parked = summary(await node.send(user_message(REPORT)))
        return parked, {"parked": parked}
    events, closed = await node.stream(user_message(REPORT))
    last = events[-1] if events else {}
    parked = {
        "id": events[0].get("id") if events else None,
        "contextId": last.get("contextId"),
        "state": last.get("state"),
        "statusTexts": last.get("statusTexts", []),
        "statusData": last.get("statusData", []),
    }
    return parked, {"parked": parked, "parkEvents": events, "parkClosed": closed}


async def round_trip(node: Node, streamed, approved, feedback=None):
    parked, seen = await park(node, streamed)
    approval = parked["statusData"][0] if parked["statusData"] else {}
    answer = {"approval_id": approval.get("approval_id", ""), "approved": approved}
    if feedback is not None:
        answer["feedback"] = feedback
    reply = user_message(data=answer, task_id=parked["id"], context_id=parked["contextId"])
    if streamed:
        events, closed = await node.stream(reply)
        seen.update(events=events, closed=closed)
    else:
        seen["reply"] = await node.attempt(node.send(reply))
    seen["final"] = summary(await node.get(parked["id"])) if parked["id"] else None
    emit(approval=approval, **seen)


async def history(node: Node):
    first = await node.send(user_message("My favourite colour is teal."))
    second = await node.send(user_message("what did I say first?", context_id=first.context_id))
    fresh = await node.send(user_message("what did I say first?"))
    emit(first=summary(first), second=summary(second), fresh=summary(fresh))


async def errors(node: Node):
    observed = {
        "unknown_get": await node.attempt(node.get("no-such-task")),
        "unknown_cancel": await node.attempt(node.cancel("no-such-task")),
        "unknown_continue": await node.attempt(node.send(user_message("go on", task_id="no-such-task"))),
    }
    parked = await node.send(user_message(REPORT))
    real = summary(parked)["statusData"][0]["approval_id"]
    observed["wrong_approval"] = await node.attempt(
        node.send(user_message(data={"approval_id": "not-" + real, "approved": True}, task_id=parked.id))
    )
    observed["missing_approved"] = await node.attempt(
        node.send(user_message(data={"approval_id": real}, task_id=parked.id))
    )
    observed["still"] = summary(await node.get(parked.id))
    for version in ["99.0", "0.3", "1.0"]:
        context = ClientCallContext(service_parameters={"A2A-Version": version})
        observed[f"version_{version}"] = await node.attempt(node.get(parked.id, context=context))
    emit(**observed)


def webhook(url, token, task_id="", config_id=""):
    return TaskPushNotificationConfig(
        task_id=task_id,
        id=config_id,
        url=url,
        token=token,
        authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-1"),
    )


async def attempt_dict(call):
    """The awaited call's answer as JSON (a config, a list, None), or the SDK exception it raised."""
    try:
        result = await call
    except Exception as exc:  # noqa: BLE001 - every SDK error is an observation here
        return error_of(exc)
    return None if result is None else MessageToDict(result)


async def push_crud(node: Node, hook, refused):
    client = node.plain
    task = await node.send(user_message("hello"))
    tid = task.id

    def create(config_id, url, token=""):
        config = TaskPushNotificationConfig(task_id=tid, id=config_id, url=url, token=token)
        return attempt_dict(client.create_task_push_notification_config(config))

    async def ids():
        listed = await client.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=tid))
        return [[c.id, c.url] for c in listed.configs]

    def get(config_id):
        request = GetTaskPushNotificationConfigRequest(task_id=tid, id=config_id)
        return attempt_dict(client.get_task_push_notification_config(request))

    def delete(config_id):
        request = DeleteTaskPushNotificationConfigRequest(task_id=tid, id=config_id)
        return attempt_dict(client.delete_task_push_notification_config(request))

    seen = {"taskId": tid, "transport": type(client._transport).__name__}
    seen["created"] = await create("p1", hook, "tok-1")
    seen["got"] = await get("p1")
    seen["second"] = await create("p2", hook)
    seen["listed"] = await ids()
    seen["replacedAnswer"] = await create("p1", hook + "/moved", "tok-2")
    seen["replaced"] = await ids()
    seen["deleted"] = await delete("p1")
    seen["afterDelete"] = await ids()
    seen["gone"] = await get("p1")
    seen["deleteAgain"] = await delete("p1")
    seen["defaultId"] = await create("", hook)
    seen["unknownTask"] = await attempt_dict(
        client.create_task_push_notification_config(TaskPushNotificationConfig(task_id="no-such-task", url=hook))
    )
    seen["noUrl"] = await create("p3", "")
    seen["refused"] = await create("p4", refused)
    seen["overTask"] = [await create(config_id, hook) for config_id in ["p5", "p6", "p7"]]
    emit(**seen)


async def push_send(node: Node, text, hook, token):
    """SendMessage with a push config: the task the node answered."""
    request = SendMessageRequest(
        message=user_message(text),
        configuration=SendMessageConfiguration(task_push_notification_config=webhook(hook, token)),
    )
    responses = [r async for r in node.plain.send_message(request)]
    return responses[0].task


async def push_round(node: Node, hook, token):
    parked = await push_send(node, REPORT, hook, token)
    approval = summary(parked)["statusData"][0] if summary(parked)["statusData"] else {}
    listed = await node.plain.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=parked.id)
    )
    reply = user_message(
        data={"approval_id": approval.get("approval_id", ""), "approved": True},
        task_id=parked.id,
        context_id=parked.context_id,
    )
    await node.send(reply)
    emit(
        parked=summary(parked),
        configs=[MessageToDict(c) for c in listed.configs],
        final=summary(await node.get(parked.id)),
        transport=type(node.plain._transport).__name__,
    )


def delivery_summary(record):
    """One logged delivery, its body read as the SDK reads a StreamResponse, unknown fields refused."""
    seen = {k: record[k] for k in ("token", "authorization", "contentType", "answered")}
    try:
        event = Parse(record["body"], StreamResponse(), ignore_unknown_fields=False)
    except Exception as exc:  # noqa: BLE001 - a body the SDK cannot read is the observation
        return dict(seen, strict=False, error=repr(exc))
    return dict(seen, strict=True, **event_summary(event))


async def deliveries(log, count):
    with open(log, encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    emit(deliveries=[delivery_summary(r) for r in records[:count]], logged=len(records))


async def main(argv):
    scenario, url, *args = argv
    if scenario == "deliveries":
        await deliveries(args[0], int(args[1]))
        return
    streamed = "--stream" in args
    args = [a for a in args if a != "--stream"]
    async with Node(url) as node:
        if scenario == "card":
            await card(node)
        elif scenario == "send":
            await send(node, args[0])
        elif scenario == "stream":
            await stream(node, args[0])
        elif scenario == "get":
            await get(node)
        elif scenario == "list":
            await list_tasks(node)
        elif scenario == "cancel":
            await cancel(node)
        elif scenario == "approve":
            await round_trip(node, streamed, True)
        elif scenario == "reject":
            await round_trip(node, streamed, False, args[0])
        elif scenario == "history":
            await history(node)
        elif scenario == "errors":
            await errors(node)
        elif scenario == "push-crud":
            await push_crud(node, args[0], args[1])
        elif scenario == "push-round":
            await push_round(node, args[0], args[1])
        elif scenario == "push-send":
            emit(task=summary(await push_send(node, args[0], args[1], args[2])))
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
