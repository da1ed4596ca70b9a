"""Drive agora-node's A2A HTTP+JSON (REST) binding with the real a2a-sdk 1.3.0 client.

Usage: rest_client.py SCENARIO NODE_URL [ARGS]

  tour                  send, get, list, stream, park a task, subscribe to it, cancel it
                        (twice), get an unknown task
  approve [--stream]    the approval round trip, approved (sdk_client.py's, over REST)
  extended TOKEN        GetExtendedAgentCard with the operator's token, and without it
  park                  park a task on its approval (for a later answer over JSON-RPC)
  push-crud HOOK REFUSED, push-round HOOK TOKEN
                        sdk_client.py's push scenarios, over REST

The clients are the SDK's own, built from the node's card with
ClientConfig(supported_protocol_bindings=["HTTP+JSON"]); an httpx event hook
records every request on the wire ("METHOD path", and whether it carried a
Content-Type), so the test can tell the REST paths were really used. Prints one
JSON line of what the SDK observed (sdk_client.py's summaries); tests/e2e/a2a_rest.rs
judges it.
"""

import asyncio
import json
import os
import sys

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdk_client as sdk  # noqa: E402 - the JSON-RPC script's summaries and scenarios, one copy

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory  # noqa: E402
from a2a.types.a2a_pb2 import GetExtendedAgentCardRequest, SubscribeToTaskRequest  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402

REST = ["HTTP+JSON"]


class RestNode(sdk.Node):
    """sdk_client's Node, its clients asking for the HTTP+JSON binding, its wire recorded."""

    def __init__(self, url, headers=None):
        super().__init__(url)
        self.wire = []
        self.http = httpx.AsyncClient(
            timeout=sdk.TIMEOUT,
            headers=headers or {},
            event_hooks={"request": [self.on_request]},
        )

    async def on_request(self, request):
        typed = "content-type" in request.headers
        self.wire.append(f"{request.method} {request.url.path}" + (" typed" if typed else ""))

    async def __aenter__(self):
        self.card = await A2ACardResolver(self.http, self.url).get_agent_card()
        self.plain = self.client(streaming=False)
        self.streaming = self.client(streaming=True)
        return self

    def client(self, streaming):
        config = ClientConfig(streaming=streaming, httpx_client=self.http, supported_protocol_bindings=REST)
        return ClientFactory(config).create(self.card)

    def observed(self, **observed):
        """What the scenario saw, with the wire and the transport the client picked."""
        return dict(observed, wire=self.wire, transport=type(self.plain._transport).__name__)

    async def subscribe(self, task_id):
        events = []

        async def read():
            async for event in self.streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
                events.append(sdk.event_summary(event))

        try:
            await asyncio.wait_for(read(), sdk.TIMEOUT)
            closed = True
        except asyncio.TimeoutError:
            closed = False
        return events, closed


async def tour(node: RestNode):
    sent = await node.send(sdk.user_message("hello"))
    got = await node.get(sent.id)
    listed = await node.list(context_id=sent.context_id)
    events, closed = await node.stream(sdk.user_message("hello again"))
    parked = await node.send(sdk.user_message(sdk.REPORT))
    subscribed, subscribe_closed = await node.subscribe(parked.id)
    canceled = await node.attempt(node.cancel(parked.id))
    again = await node.attempt(node.cancel(parked.id))
    unknown = await node.attempt(node.get("no-such-task"))
    sdk.emit(
        **node.observed(
            sent=sdk.summary(sent),
            got=sdk.summary(got),
            listed=listed,
            events=events,
            closed=closed,
            parked=sdk.summary(parked),
            subscribed=subscribed,
            subscribeClosed=subscribe_closed,
            canceled=canceled,
            again=again,
            unknown=unknown,
        )
    )


async def approve(node: RestNode, streamed):
    # round_trip reports through sdk.emit: add the wire to what it reports.
    report = sdk.emit
    sdk.emit = lambda **observed: report(**node.observed(**observed))
    await sdk.round_trip(node, streamed, True)


async def extended(url, token):
    async with RestNode(url, headers={"Authorization": f"Bearer {token}"}) as authed:
        card = await authed.plain.get_extended_agent_card(GetExtendedAgentCardRequest())
        observed = authed.observed(public=MessageToDict(authed.card), extended=MessageToDict(card))
    async with RestNode(url) as anonymous:
        observed["anonymous"] = await anonymous.attempt(
            anonymous.plain.get_extended_agent_card(GetExtendedAgentCardRequest())
        )
        observed["anonymousWire"] = anonymous.wire
    sdk.emit(**observed)


async def park(node: RestNode):
    parked = await node.send(sdk.user_message(sdk.REPORT))
    sdk.emit(**node.observed(parked=sdk.summary(parked)))


async def main(argv):
    scenario, url, *args = argv
    if scenario == "extended":
        await extended(url, args[0])
        return
    async with RestNode(url) as node:
        if scenario == "tour":
            await tour(node)
        elif scenario == "approve":
            await approve(node, "--stream" in args)
        elif scenario == "park":
            await park(node)
        elif scenario == "push-crud":
            await sdk.push_crud(node, args[0], args[1])
        elif scenario == "push-round":
            await sdk.push_round(node, args[0], args[1])
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
