"""agora-protocol 0.2.0's sending side against an Agora node.

Usage: sender.py BASE_URL PROTOCOLS_DIR STORAGE_DIR
Prints one JSON object with what every exchange returned; the Rust test
asserts on it. Uses the library's own SimpleSenderTransporter (the wire code)
and its full Sender + Querier with a scripted Toolformer.
"""

import json
import os
import sys

import requests
from agora import Sender
from agora.common.core import Suitability
from agora.sender.components.querier import Querier
from agora.sender.components.transporter import SimpleSenderTransporter
from agora.sender.task_schema import TaskSchema
from agora.utils import compute_hash, encode_as_data_uri, extract_metadata

from scripted import ScriptedToolformer

base, protocols_dir, storage_dir = sys.argv[1], sys.argv[2], sys.argv[3]
results = {}


def read(name):
    with open(os.path.join(protocols_dir, name), encoding="utf-8", newline="") as f:
        return f.read()


unit_doc = read("unit-conversion.md")
guess_doc = read("guess-number.md")


class RecordingTransporter(SimpleSenderTransporter):
    """The library's transporter, remembering its conversations so the test can look at them."""

    def __init__(self):
        self.conversations = []

    def new_conversation(self, target, multiround, protocol_hash, protocol_sources):
        conversation = super().new_conversation(target, multiround, protocol_hash, protocol_sources)
        self.conversations.append(conversation)
        return conversation


# --- 1. The transporter alone: the exact requests the library puts on the wire. ---
transport = SimpleSenderTransporter()

single = transport.new_conversation(base, False, None, None)
results["transport_single"] = single("what is 6 * 7")

with_protocol = transport.new_conversation(
    base, False, compute_hash(unit_doc), [encode_as_data_uri(unit_doc)]
)
results["transport_protocol"] = with_protocol(json.dumps({"value": 2, "from": "kg", "to": "g"}))

game = transport.new_conversation(base, True, compute_hash(guess_doc), [encode_as_data_uri(guess_doc)])
results["transport_game_start"] = game(json.dumps({"start": {"min": 5, "max": 5}}))
results["transport_game_guess"] = game(json.dumps({"guess": 5}))
results["transport_game_history"] = game(json.dumps({"history": True}))
game_id = game._conversation_id
results["transport_game_id"] = game_id
game.close()
after = requests.post(f"{base}/conversations/{game_id}", json={"body": "{\"guess\": 5}"})
results["transport_after_close_status"] = after.status_code

# --- 2. The full Sender with a scripted model. ---
def querier_script(conversation, message):
    """Plays the model's part in Querier.handle_conversation: send queries, deliver output."""
    if conversation.turns > 1:
        return "done"
    if "Guess the number" in message:
        low, high = 1, 16
        conversation.call("send_query", json.dumps({"start": {"min": low, "max": high}}))
        guesses = 0
        while low <= high:
            guess = (low + high) // 2
            reply = conversation.call("send_query", json.dumps({"guess": guess}))
            guesses += 1
            if not isinstance(reply, dict) or "result" not in reply:
                conversation.call("register_error", f"unexpected reply {reply!r}")
                return "error"
            if reply["result"] == "correct":
                break
            if reply["result"] == "higher":
                low = guess + 1
            else:
                high = guess - 1
        history = conversation.call("send_query", json.dumps({"history": True}))
        conversation.call(
            "deliverStructuredOutput", number=guess, guesses=guesses, history=history["guesses"]
        )
    elif "Unit conversion" in message:
        reply = conversation.call("send_query", json.dumps({"value": 3, "from": "ft", "to": "in"}))
        conversation.call("deliverStructuredOutput", output=reply)
    else:
        reply = conversation.call("send_query", "what is (1 + 2) * 5")
        conversation.call("deliverStructuredOutput", output=reply)
    return "done"


toolformer = ScriptedToolformer({"default": querier_script})
recorder = RecordingTransporter()
sender = Sender.make_default(
    toolformer,
    storage_path=os.path.join(storage_dir, "sender.json"),
    querier=Querier(toolformer, max_queries=20),
    transporter=recorder,
    implementation_threshold=10**6,
)

any_schema = TaskSchema("Ask the node", {"type": "object", "properties": {}}, {"type": "object"})
results["sender_no_protocol"] = sender.execute_task(
    "ask", any_schema, {}, base, force_no_protocol=True
)

# extract_metadata reads only the front-matter layout (guess-number.md); unit-conversion.md
# uses the spec's layout, so its metadata is given as the library would store it.
unit_metadata = {"name": "Unit conversion", "description": "", "multiround": False}
for task_id, document, metadata in [
    ("convert", unit_doc, unit_metadata),
    ("game", guess_doc, extract_metadata(guess_doc)),
]:
    protocol_hash = compute_hash(document)
    sender.memory.register_new_protocol(protocol_hash, document, [], metadata)
    sender.memory.set_default_suitability(protocol_hash, task_id, Suitability.ADEQUATE)

results["sender_protocol"] = sender.execute_task("convert", any_schema, {}, base)

game_schema = TaskSchema(
    "Guess the number",
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {
            "number": {"type": "integer"},
            "guesses": {"type": "integer"},
            "history": {"type": "array"},
        },
    },
)
results["sender_game"] = sender.execute_task("game", game_schema, {}, base)

results["sender_conversations"] = [
    {"multiround": c.multiround, "hash": c.protocol_hash, "id": c._conversation_id}
    for c in recorder.conversations
]
# The Sender closes every conversation on its way out (DELETE): none may still answer.
results["sender_after_close_statuses"] = [
    requests.post(f"{base}/conversations/{c._conversation_id}", json={"body": "hello"}).status_code
    for c in recorder.conversations
    if c._conversation_id is not None
]

print(json.dumps(results))
