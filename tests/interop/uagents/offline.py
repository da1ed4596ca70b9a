"""Run real uagents 0.26.1 offline on 127.0.0.1: no Almanac, no Agentverse,
no mailbox, no telemetry. Addresses resolve through a static table."""

import json
import os

import uagents.asgi
from uagents import Agent, Model
from uagents.resolver import Resolver


class Message(Model):
    text: str


class StaticResolver(Resolver):
    """Resolve agent addresses from a fixed address -> [endpoint] table."""

    def __init__(self, table: dict[str, str]):
        self._table = table

    async def resolve(self, destination: str):
        address = destination.split("://")[-1].split("/")[-1]
        endpoint = self._table.get(address)
        return (address, [endpoint]) if endpoint else (None, [])


async def _nothing(*_args, **_kwargs):
    return None


def patch_network_out():
    """Take out every call uagents makes to the Almanac contract or Agentverse,
    and serve on loopback only."""
    uagents.asgi.HOST = "127.0.0.1"
    Agent.start_registration_loop = lambda self: None
    Agent._update_agent_status = _nothing
    Agent._resolve_events_enabled = _nothing
    Agent.publish_manifest = _nothing


def peers_from_env() -> dict[str, str]:
    """`UAGENTS_PEERS` is a JSON object address -> http://…/submit."""
    return json.loads(os.environ.get("UAGENTS_PEERS", "{}"))


def make_agent(name: str, seed: str, port: int) -> Agent:
    patch_network_out()
    return Agent(
        name=name,
        seed=seed,
        port=port,
        endpoint=[f"http://127.0.0.1:{port}/submit"],
        resolve=StaticResolver(peers_from_env()),
        enable_agent_inspector=False,
        report_events=False,
        mark_inactive_on_shutdown=False,
        publish_agent_details=False,
        network="testnet",
    )


def emit(**fields):
    """One JSON line on stdout for the Rust test to read."""
    print(json.dumps(fields), flush=True)
