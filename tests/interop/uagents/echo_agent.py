"""A real uAgent serving the echo protocol: Message{text} -> Message{"echo: " + text}.

Usage: echo_agent.py SEED PORT [quiet]   (UAGENTS_PEERS maps sender addresses to endpoints)
Prints {"event": "ready", "address": …} once listening, and {"event": "received", …}
for every message, so the test can see what reached it — unless `quiet` (benchmark row
4), so that a benchmark measures the agent, not a pipe.
"""

import sys

from uagents import Context
from offline import Message, emit, make_agent

seed, port = sys.argv[1], int(sys.argv[2])
quiet = sys.argv[3:] == ["quiet"]
agent = make_agent("echo", seed, port)


@agent.on_message(model=Message)
async def echo(ctx: Context, sender: str, msg: Message):
    if not quiet:
        emit(event="received", sender=sender, text=msg.text, session=str(ctx.session))
    await ctx.send(sender, Message(text="echo: " + msg.text))


@agent.on_event("startup")
async def ready(_ctx: Context):
    emit(event="ready", address=agent.address)


if __name__ == "__main__":
    agent.run()
