"""Benchmark row 2: agora-protocol 0.2.0's ReceiverServer doing the unit
conversion the node's unit-converter plugin does.

Usage: agora_reference.py PORT STORAGE_DIR
(PYTHONPATH must include tests/interop/agora for the scripted Toolformer.)

Everything on the request path is the library's own: Flask's ReceiverServer,
Receiver.create_conversation (protocol memory in its JSON storage, suitability
check), the Responder's conversation. Only the model is replaced, by a Python
function that answers the way the plugin does, so the comparison measures the
server stack and not a language model.
"""

import json
import sys

from scripted import serve_receiver

port, storage_dir = int(sys.argv[1]), sys.argv[2]

# Metres per unit, as in plugins/unit-converter for lengths.
LENGTHS = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "mi": 1609.344}


def convert(_conversation, message):
    try:
        query = json.loads(message) if isinstance(message, str) else message
        value = float(query["value"]) * LENGTHS[query["from"]] / LENGTHS[query["to"]]
        return json.dumps(
            {"from": {"unit": query["from"], "value": float(query["value"])}, "unit": query["to"], "value": value}
        )
    except Exception as error:  # the plugin answers protocol errors in the body, too
        return json.dumps({"error": f"cannot convert: {error}"})


serve_receiver(convert, port, storage_dir, threaded=True)
