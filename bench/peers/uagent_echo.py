"""Benchmark row 4: a real uAgent (uagents 0.26.1) answering Message{text}
with Message{"echo: " + text} in the same session, like plugins/uagents-echo.

Usage: uagent_echo.py SEED PORT
(PYTHONPATH must include tests/interop/uagents for the offline set-up: no
Almanac, no Agentverse, loopback only.) Unlike the interop test's agent it
prints nothing per message, so the benchmark measures the agent, not a pipe.
"""

import sys

from uagents import Context

from offline import Message, emit, make_agent

seed, port = sys.argv[1], int(sys.argv[2])
agent = make_agent("bench-echo", seed, port)


@agent.on_message(model=Message)
async def echo(ctx: Context, sender: str, msg: Message):
    await ctx.send(sender, Message(text="echo: " + msg.text))


@agent.on_event("startup")
async def ready(_ctx: Context):
    emit(event="ready", address=agent.address)


if __name__ == "__main__":
    agent.run()
