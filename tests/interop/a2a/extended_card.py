"""Fetch agora-node's authenticated extended card with the real a2a-sdk 1.3.0 client.

Usage: extended_card.py SCENARIO NODE_URL [TOKEN]

  authed TOKEN   the SDK way: the public card's bearer scheme, an AuthInterceptor and a
                 session's credential; GetExtendedAgentCard (the client then holds the
                 extended card), then a streamed "hello" through that same client
  anonymous      GetExtendedAgentCard with no credential
  public         what get_extended_agent_card returns when the public card offers none

Prints one JSON line of what the SDK observed (both cards as ProtoJSON, the streamed
events' kinds, the exception's class and message); tests/e2e/a2a_extended_card.rs
judges it.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor, InMemoryContextCredentialStore
from a2a.types.a2a_pb2 import (
    GetExtendedAgentCardRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)

# Generous: a liveness bound for a debug node on a loaded 2-core machine, not a speed target.
TIMEOUT = 60.0
SESSION = "operator-session"
# The scheme name the node's card declares (`securitySchemes.bearer`).
SCHEME = "bearer"


def emit(**observed):
    print(json.dumps(observed), flush=True)


def failure(exc):
    return {"error": type(exc).__name__, "message": str(exc)}


def hello():
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="hello")])


def event_kind(event):
    kind = event.WhichOneof("payload")
    if kind == "status_update":
        return f"status:{TaskState.Name(event.status_update.status.state)}"
    return kind or "empty"


async def authed(http, url, token):
    public = await A2ACardResolver(http, url).get_agent_card()
    credentials = InMemoryContextCredentialStore()
    await credentials.set_credentials(SESSION, SCHEME, token)
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(
        public, interceptors=[AuthInterceptor(credentials)]
    )
    context = ClientCallContext(state={"sessionId": SESSION})
    extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest(), context=context)
    # The client now reads its capabilities and security schemes from the extended card:
    # it must still stream, and still send the credential.
    events = []

    async def read():
        async for event in client.send_message(SendMessageRequest(message=hello()), context=context):
            events.append(event_kind(event))

    try:
        await asyncio.wait_for(read(), TIMEOUT)
        after = {"events": events}
    except Exception as exc:  # noqa: BLE001 - an SDK error is an observation here
        after = {"events": events, **failure(exc)}
    emit(public=MessageToDict(public), extended=MessageToDict(extended), after_swap=after)


async def anonymous(http, url):
    public = await A2ACardResolver(http, url).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http)).create(public)
    try:
        card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        emit(public=MessageToDict(public), extended=MessageToDict(card))
    except Exception as exc:  # noqa: BLE001 - the refusal is the observation
        emit(public=MessageToDict(public), **failure(exc))


async def public_only(http, url):
    public = await A2ACardResolver(http, url).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http)).create(public)
    card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    emit(public=MessageToDict(public), returned=MessageToDict(card))


async def main(argv):
    scenario, url, *args = argv
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        if scenario == "authed":
            await authed(http, url, args[0])
        elif scenario == "anonymous":
            await anonymous(http, url)
        elif scenario == "public":
            await public_only(http, url)
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
