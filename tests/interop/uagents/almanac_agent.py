"""A real uAgent that registers in an Almanac API and resolves through it
(uagents 0.26.1's own AlmanacApiRegistrationPolicy and AlmanacApiResolver).

Usage: almanac_agent.py ALMANAC_API SEED PORT [NODE_ADDRESS TEXT]
Echoes Message{text} -> Message{"echo: " + text} to any sender. With NODE_ADDRESS,
it registers, then sends Message{TEXT} to that address at start-up and reports
the reply. Prints {"event": "ready"|"received"|"sent"|"reply", …} lines.
"""

import sys

import uagents.asgi
from uagents import Agent, Context
from uagents.registration import AlmanacApiRegistrationPolicy
from uagents.resolver import AlmanacApiResolver

from offline import Message, _nothing, emit

api, seed, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
node_address, text = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)

# Loopback only, and no Agentverse: only the Almanac API is spoken to.
uagents.asgi.HOST = "127.0.0.1"
Agent._update_agent_status = _nothing
Agent._resolve_events_enabled = _nothing
Agent.publish_manifest = _nothing

agent = Agent(
    name="almanac-peer",
    seed=seed,
    port=port,
    endpoint=[f"http://127.0.0.1:{port}/submit"],
    resolve=AlmanacApiResolver(almanac_api_url=api),
    registration_policy=AlmanacApiRegistrationPolicy(almanac_api=api),
    enable_agent_inspector=False,
    report_events=False,
    mark_inactive_on_shutdown=False,
    publish_agent_details=False,
    network="mainnet",
)


@agent.on_message(model=Message)
async def on_message(ctx: Context, sender: str, msg: Message):
    if node_address and sender == node_address:
        emit(event="reply", sender=sender, text=msg.text, session=str(ctx.session))
        return
    emit(event="received", sender=sender, text=msg.text)
    await ctx.send(sender, Message(text="echo: " + msg.text))


@agent.on_event("startup")
async def start(ctx: Context):
    # Registered before anything is sent, so the node can resolve the reply's target.
    await agent.register()
    emit(event="ready", address=agent.address)
    if node_address:
        status = await ctx.send(node_address, Message(text=text))
        emit(event="sent", status=str(status.status), detail=str(status.detail))


if __name__ == "__main__":
    agent.run()
