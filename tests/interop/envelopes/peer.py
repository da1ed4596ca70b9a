"""An independent Agora signed-envelope peer ("Agora Protocol Specification v1.0", signed envelopes §1-2).

Written against the spec only, with `cryptography` (Ed25519), `rfc8785` (JCS) and
`base58` (did:key). It signs its own envelopes, sends them to a node over HTTP,
and verifies every reply with its own verifier. Usage:

    python peer.py http://127.0.0.1:PORT/envelopes

prints one JSON report of every exchange on stdout and exits non-zero if a
reply fails verification.
"""

import base64
import json
import sys
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

import base58
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ED25519_PUB = b"\xed\x01"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def did_key(key: Ed25519PrivateKey) -> str:
    return "did:key:z" + base58.b58encode(ED25519_PUB + public_bytes(key)).decode()


def key_of_sender(sender_id: str) -> Ed25519PublicKey:
    if sender_id.startswith("did:key:z"):
        raw = base58.b58decode(sender_id[len("did:key:z"):])
        if not raw.startswith(ED25519_PUB) or len(raw) != 34:
            raise ValueError("not an Ed25519 did:key")
        return Ed25519PublicKey.from_public_bytes(raw[2:])
    raw = b64url_decode(sender_id)
    if len(raw) != 32:
        raise ValueError("raw sender id is not 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def no_duplicates(pairs):
    obj = {}
    for name, value in pairs:
        if name in obj:
            raise ValueError(f"duplicate member {name!r}")
        obj[name] = value
    return obj


def signing_input(envelope: dict, variant: str) -> bytes:
    copy = json.loads(json.dumps(envelope))
    if variant == "removed":
        copy["sender"].pop("signature", None)
    else:
        copy["sender"]["signature"] = ""
    return rfc8785.dumps(copy)


def sign(envelope: dict, key: Ed25519PrivateKey, variant: str = "empty") -> dict:
    envelope["sender"]["signature"] = b64url(key.sign(signing_input(envelope, variant)))
    return envelope


def verify(raw: bytes) -> dict:
    """Verify a received envelope from its bytes; return it parsed, or raise."""
    envelope = json.loads(raw, object_pairs_hook=no_duplicates)
    signature = b64url_decode(envelope["sender"]["signature"])
    key = key_of_sender(envelope["sender"]["id"])
    for variant in ("empty", "removed"):
        try:
            key.verify(signature, signing_input(envelope, variant))
            return envelope
        except InvalidSignature:
            continue
    raise InvalidSignature("the reply's signature does not verify")


def envelope(kind: str, sender_id: str, payload: dict) -> dict:
    return {
        "protocol": "agora/1.0",
        "id": str(uuid.uuid4()),
        "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "type": kind,
        "sender": {"id": sender_id, "signature": ""},
        "payload": payload,
    }


def post(url: str, body: bytes):
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Peer:
    def __init__(self, url: str):
        self.url = url
        self.key = Ed25519PrivateKey.generate()
        self.did = did_key(self.key)
        self.raw_id = b64url(public_bytes(self.key))
        self.node = None
        self.report = []

    def exchange(self, step, kind, payload, variant="empty", sender_id=None, tamper=None):
        sent = sign(envelope(kind, sender_id or self.did, payload), self.key, variant)
        if tamper:
            tamper(sent)
        status, raw = post(self.url, json.dumps(sent).encode())
        reply = verify(raw)  # raises: a reply we cannot verify fails the whole run
        if self.node is None:
            self.node = reply["sender"]["id"]
        assert reply["sender"]["id"] == self.node, "reply from another signer"
        self.report.append(
            {
                "step": step,
                "http_status": status,
                "type": reply["type"],
                "payload": reply["payload"],
                "verified": True,
                "sent_id": sent["id"],
                "reply_id": reply["id"],
            }
        )
        return sent, reply

    def run(self):
        _, welcome = self.exchange("hello", "HELLO", {})
        assert welcome["payload"]["did"] == self.node
        self.exchange(
            "direct", "REQUEST", {"resource": "agora:sum:v1", "params": {"numbers": [1, 2.5, 3]}}
        )
        request, offer = self.exchange(
            "request_negotiated",
            "REQUEST",
            {"resource": "agora:primes:v1", "params": {"limit": 1000}, "budget": {"max": 5}},
        )
        assert offer["type"] == "OFFER" and offer["payload"]["request_id"] == request["id"]
        # The ACCEPT is signed with the spec's other option: signature member removed.
        self.exchange(
            "accept_removed_variant",
            "ACCEPT",
            {"offer_id": offer["id"], "payment_proof": "python-peer"},
            variant="removed",
        )
        self.exchange("status", "STATUS", {"request_id": request["id"]})
        self.exchange("raw_key_sender", "HELLO", {}, sender_id=self.raw_id)

        def tamper(sent):
            sent["payload"]["params"]["numbers"] = [100]

        self.exchange(
            "tampered",
            "REQUEST",
            {"resource": "agora:sum:v1", "params": {"numbers": [1]}},
            tamper=tamper,
        )
        return {"did": self.did, "node": self.node, "steps": self.report}


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(Peer(sys.argv[1]).run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
