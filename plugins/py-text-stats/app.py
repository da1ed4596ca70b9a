"""Serves protocols/text-stats.md in Python: a component for the node's WIT
world (plugin-sdk/wit/agora-node.wit), built by componentize-py. Its types
and the shared plumbing (agora_plugin) come from plugin-sdk/bindings/python.

Invalid input is a protocol-level error answered inside `body`, as the
document prescribes; the handler never raises on input.
"""

import json
import string
from collections import Counter

import wit_world
from wit_world.imports import host, types

import agora_plugin
from document import DOCUMENT

MAX_TEXT = 100_000
PUNCTUATION = string.punctuation


def statistics(request):
    text = request.get("text")
    top = request.get("top", 3)
    if not isinstance(text, str):
        return {"error": 'body must have a string "text"'}
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= 20:
        return {"error": '"top" must be an integer from 1 to 20'}
    if len(text) > MAX_TEXT:
        return {"error": f"text is longer than {MAX_TEXT} characters"}
    words = [w for w in (piece.strip(PUNCTUATION).lower() for piece in text.split()) if w]
    counts = Counter(words)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {
        "words": len(words),
        "characters": len(text),
        "lines": text.count("\n") + 1 if text else 0,
        "top": [{"word": word, "count": count} for word, count in ranked],
    }


class WitWorld(wit_world.WitWorld):
    def manifest(self) -> types.Manifest:
        return agora_plugin.manifest(
            "py-text-stats",
            "0.1.0",
            "Word, character and line counts (protocols/text-stats.md), in Python",
            protocols=[DOCUMENT],
        )

    def handle(self, message: types.Message) -> str:
        request = agora_plugin.json_object(message.body)
        if request is None:
            return json.dumps({"error": 'body must be an object {"text", "top"?}'})
        reply = statistics(request)
        if "error" in reply:
            host.log(host.Level.DEBUG, f"rejected a request: {reply['error']}")
        return json.dumps(reply)

    def run_tool(self, name: str, arguments: str) -> str:
        raise agora_plugin.unknown_tool(name)
