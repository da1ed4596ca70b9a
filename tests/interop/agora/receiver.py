"""agora-protocol 0.2.0's ReceiverServer, for the node's client to talk to.

Usage: receiver.py PORT STORAGE_DIR
Serves on 127.0.0.1:PORT. The library's Receiver checks and stores protocol
documents itself (hash verification, data: URI decoding, its suitability
check); only the model's answers are scripted: the protocol checker says YES,
and the responder answers every message with JSON describing what it saw.
"""

import json
import logging
import os
import sys

from agora import Receiver, ReceiverServer

from scripted import ScriptedToolformer

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


toolformer = ScriptedToolformer(
    {
        "protocolChecking": lambda conversation, message: "The tools suffice. YES",
        "default": responder,
    }
)
receiver = Receiver.make_default(
    toolformer,
    storage_path=os.path.join(storage_dir, "receiver.json"),
    implementation_threshold=10**6,
)
server = ReceiverServer(receiver)
logging.getLogger("werkzeug").setLevel(logging.ERROR)
print(f"listening on 127.0.0.1:{port}", flush=True)
server.run(host="127.0.0.1", port=port)
