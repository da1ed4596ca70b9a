"""Broken envelopes built with the library's own Envelope class.

Usage: broken.py TARGET_ADDRESS TARGET_URL SENDER_SEED OTHER_SEED LISTEN_PORT [--reference]

Each broken envelope is POSTed to TARGET_URL, without and with
`x-uagents-connection: sync`. Meanwhile an HTTP server on LISTEN_PORT (the
sender's endpoint in the target's peer table) records every envelope the
target sends back, so the test can check that broken envelopes get no reply.
Then a valid envelope (the control) must get a verified echo there, and the
same envelope sent again (a replay) must be refused without a second reply.
With --reference (the target is a real uAgent) only the broken cases run,
without the sync variant.
Prints one JSON line with every outcome.
"""

import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
from uagents_core.envelope import Envelope
from uagents_core.identity import Identity
from uagents_core.models import Model

from offline import Message

target, target_url, sender_seed, other_seed, listen_port = sys.argv[1:6]
reference = "--reference" in sys.argv
sender = Identity.from_seed(sender_seed, 0)
other = Identity.from_seed(other_seed, 0)
received: list[dict] = []


class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        received.append(json.loads(body))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(listen_port)), Sink)
threading.Thread(target=server.serve_forever, daemon=True).start()


def base(text: str) -> Envelope:
    env = Envelope(
        version=1,
        sender=sender.address,
        target=target,
        session=uuid.uuid4(),
        schema_digest=Model.build_schema_digest(Message),
        expires=int(time.time()) + 30,
    )
    env.encode_payload(Message(text=text).model_dump_json())
    return env


def bad_signature():
    env = base("bad signature")
    env.sign(sender)
    env.encode_payload(Message(text="tampered after signing").model_dump_json())
    return env


def other_signer():
    env = base("other signer")
    env.sign(other)
    return env


def missing_signature():
    return base("missing signature")


def wrong_target():
    env = base("wrong target")
    env.target = other.address
    env.sign(sender)
    return env


def expired():
    env = base("expired")
    env.expires = int(time.time()) - 60
    env.sign(sender)
    return env


def undecodable_signature():
    env = base("undecodable signature")
    env.signature = "sig1qqqqqq"
    return env


def post(env: Envelope, sync: bool):
    headers = {"content-type": "application/json"}
    if sync:
        headers["x-uagents-connection"] = "sync"
    response = requests.post(target_url, data=env.model_dump_json(), headers=headers, timeout=30)
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return [response.status_code, body]


def wait_for_replies(count: int, seconds: float) -> None:
    deadline = time.time() + seconds
    while len(received) < count and time.time() < deadline:
        time.sleep(0.05)


cases = [bad_signature, other_signer, missing_signature, wrong_target, expired, undecodable_signature]
outcome: dict = {"cases": {}}
for case in cases:
    if reference and case is expired:
        continue  # uagents does not check expiry; a reply would be legitimate
    results = {"async": post(case(), sync=False)}
    if not reference:
        results["sync"] = post(case(), sync=True)
    outcome["cases"][case.__name__] = results

if not reference:
    # The control proves the sink works: a valid envelope gets its reply there.
    control = base("control")
    control.sign(sender)
    outcome["control"] = post(control, sync=False)
    wait_for_replies(1, 20)
    outcome["replies"] = len(received)
    if received:
        reply = Envelope.model_validate(received[0])
        outcome["control_reply"] = {
            "verified": reply.verify(),
            "sender": reply.sender,
            "target": reply.target,
            "same_session": reply.session == control.session,
            "message": json.loads(reply.decode_payload()),
        }
    outcome["replay"] = post(control, sync=False)
    time.sleep(1.0)
    outcome["replies_after_replay"] = len(received)
else:
    time.sleep(1.0)
    outcome["replies"] = len(received)

print(json.dumps(outcome), flush=True)
server.shutdown()
