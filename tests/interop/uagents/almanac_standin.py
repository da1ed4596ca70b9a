"""A local stand-in for the Almanac API that checks registrations exactly as
uagents 0.26.1 produces them, and serves lookups as its resolver expects.

Usage: almanac_standin.py PORT
  POST /agents            an AgentRegistrationAttestation (AlmanacApiRegistrationPolicy):
                          parsed with the library's own model, its signature verified with
                          the library's own code; refused (422) unless every check passes.
  GET  /agents/{address}  the accepted record, {address, prefix, endpoints, protocols,
                          expiry}, as AlmanacApiResolver reads it; 404 when none.
  GET  /checks            what was accepted and refused, and lookups per address, for the
                          test to inspect.
Prints {"event": "ready"} once listening.
"""

import datetime
import json
import re
import sys
import time

from aiohttp import web
from uagents_core.identity import parse_identifier
from uagents_core.registration import AgentRegistrationAttestation

# What model_dump_json() of an AgentRegistrationAttestation holds: no more, no less.
FIELDS = {"agent_identifier", "signature", "timestamp", "protocols", "endpoints", "metadata"}
PROTOCOL = re.compile(r"^proto:[0-9a-f]{64}$")
MAX_SKEW_SECS = 60
RECORD_LIFE = datetime.timedelta(hours=48)

records: dict[str, dict] = {}
lookups: dict[str, int] = {}
accepted: list[dict] = []
refused: list[dict] = []


def check(body: object) -> tuple[AgentRegistrationAttestation, str, str]:
    """The attestation, address and prefix; ValueError naming the first failed check."""
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    if set(body) != FIELDS:
        raise ValueError(f"fields {sorted(body)} are not {sorted(FIELDS)}")
    attestation = AgentRegistrationAttestation.model_validate(body)
    prefix, _name, address = parse_identifier(attestation.agent_identifier)
    if not address:
        raise ValueError(f"no agent address in {attestation.agent_identifier!r}")
    if prefix not in ("agent", "test-agent"):
        raise ValueError(f"unknown network prefix {prefix!r}")
    if not isinstance(body["timestamp"], int):
        raise ValueError("timestamp is not an integer")
    if abs(time.time() - body["timestamp"]) > MAX_SKEW_SECS:
        raise ValueError(f"timestamp {body['timestamp']} is not now")
    previous = records.get(address)
    if previous and body["timestamp"] < previous["timestamp"]:
        raise ValueError("timestamp older than the registration it would replace")
    if not attestation.endpoints:
        raise ValueError("no endpoints")
    for endpoint in attestation.endpoints:
        if not endpoint.url.startswith(("http://", "https://")) or endpoint.weight < 1:
            raise ValueError(f"bad endpoint {endpoint}")
    for digest in attestation.protocols:
        if not PROTOCOL.match(digest):
            raise ValueError(f"bad protocol digest {digest!r}")
    try:
        verified = attestation.verify()
    except Exception as error:  # ecdsa raises for a signature over other bytes
        raise ValueError(f"signature does not verify: {error}") from error
    if not verified:
        raise ValueError("signature does not verify")
    return attestation, address, prefix


async def register(request: web.Request) -> web.Response:
    try:
        body = json.loads(await request.read())
        attestation, address, prefix = check(body)
    except Exception as error:
        refused.append({"reason": str(error)})
        return web.json_response({"detail": str(error)}, status=422)
    expiry = datetime.datetime.now(datetime.timezone.utc) + RECORD_LIFE
    records[address] = {
        "address": address,
        "prefix": prefix,
        "endpoints": [e.model_dump() for e in attestation.endpoints],
        "protocols": attestation.protocols,
        "expiry": expiry.isoformat(),
        "timestamp": body["timestamp"],
    }
    accepted.append({"address": address, "prefix": prefix, "protocols": attestation.protocols,
                     "endpoints": records[address]["endpoints"], "timestamp": body["timestamp"]})
    return web.json_response({})


async def resolve(request: web.Request) -> web.Response:
    address = request.match_info["address"]
    lookups[address] = lookups.get(address, 0) + 1
    record = records.get(address)
    if record is None:
        return web.json_response({"detail": "Agent not found"}, status=404)
    return web.json_response({k: v for k, v in record.items() if k != "timestamp"})


async def checks(_request: web.Request) -> web.Response:
    return web.json_response({"accepted": accepted, "refused": refused, "lookups": lookups})


async def ready(_app: web.Application) -> None:
    print(json.dumps({"event": "ready"}), flush=True)


app = web.Application()
app.add_routes([web.post("/agents", register), web.get("/agents/{address}", resolve),
                web.get("/checks", checks)])
app.on_startup.append(ready)

if __name__ == "__main__":
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
