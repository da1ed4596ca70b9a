"""agora-protocol 0.2.0's ReceiverServer, for the node's client to talk to.

Usage: receiver.py PORT STORAGE_DIR
Serves on 127.0.0.1:PORT. The library's Receiver checks and stores protocol
documents itself (hash verification, data: URI decoding, its suitability
check); only the model's answers are scripted: the protocol checker says YES,
and the responder answers every message with JSON describing what it saw.
"""

import json
import sys

from scripted import serve_receiver

port, storage_dir = int(sys.argv[1]), sys.argv[2]


def responder(conversation, message):
    protocol = None
    marker = "The protocol is the following:\n\n"
    if marker in conversation.prompt:
        document = conversation.prompt.split(marker, 1)[1]
        protocol = next(
            (line.split(":", 1)[1].strip() for line in document.splitlines() if line.startswith("name:")),
            "unnamed",
        )
    return json.dumps({"echo": message, "round": conversation.turns, "protocol": protocol})


serve_receiver(responder, port, storage_dir)
