"""Talk to an agora-node with the real uagents library.

Usage:
  send_to_node.py sync  NODE_ADDRESS NODE_URL SEED TEXT
      send_sync_message(); the library verifies the node's signed reply.
  send_to_node.py async NODE_ADDRESS NODE_URL SEED TEXT PORT
      a real Agent on PORT sends Message to the node at start-up and waits
      for the node's asynchronous echo in the same session.
Prints one JSON line with what came back.
"""

import asyncio
import os
import time
import sys

from uagents import Context
from uagents.communication import send_sync_message
from uagents_core.identity import Identity
from uagents_core.types import MsgStatus

from offline import Message, StaticResolver, emit, make_agent, patch_network_out

mode, node_address, node_url, seed, text = sys.argv[1:6]


async def sync_mode():
    patch_network_out()
    reply = await send_sync_message(
        node_address,
        Message(text=text),
        response_type=Message,
        sender=Identity.from_seed(seed, 0),
        resolver=StaticResolver({node_address: node_url}),
        timeout=20,
    )
    if isinstance(reply, Message):
        emit(mode="sync", reply=reply.text)
    elif isinstance(reply, MsgStatus):
        emit(mode="sync", failed=reply.detail)
    else:
        emit(mode="sync", other=str(reply))


def async_mode(port: int):
    os.environ["UAGENTS_PEERS"] = f'{{"{node_address}": "{node_url}"}}'
    agent = make_agent("sender", seed, port)
    sent = {}

    @agent.on_event("startup")
    async def send(ctx: Context):
        sent["session"] = str(ctx.session)
        emit(event="sending", session=str(ctx.session), address=agent.address)
        status = await ctx.send(node_address, Message(text=text))
        emit(event="sent", status=str(status.status))

    @agent.on_message(model=Message)
    async def reply(ctx: Context, sender: str, msg: Message):
        emit(mode="async", reply=msg.text, sender=sender, session=str(ctx.session),
             same_session=str(ctx.session) == sent.get("session"))
        os._exit(0)

    # uagents runs interval handlers once at start-up too, so judge by elapsed time,
    # not by the first call.
    started = time.monotonic()

    @agent.on_interval(period=1.0)
    async def give_up(_ctx: Context):
        if sent and time.monotonic() - started > 40:
            emit(mode="async", failed="no reply within 40 s")
            os._exit(1)

    agent.run()


if mode == "sync":
    asyncio.run(sync_mode())
elif mode == "async":
    async_mode(int(sys.argv[6]))
else:
    sys.exit(f"unknown mode {mode}")
