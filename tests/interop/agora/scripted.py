"""A scripted stand-in for agora-protocol 0.2.0's Toolformer.

The library reaches language models only through `Toolformer.new_conversation`
(prompt, tools, category) -> Conversation. These classes keep the library's
code paths (Sender, Querier, Receiver, Responder, ReceiverProtocolChecker)
intact and replace only the model's decisions with a Python function.
"""

from agora.common.core import Conversation
from agora.common.toolformers.base import Tool, Toolformer


class ScriptedConversation(Conversation):
    def __init__(self, script, prompt, tools, category):
        self.script = script
        self.prompt = prompt
        self.tools = {t.name: t for t in (Tool.from_toollike(t) for t in tools)}
        self.category = category
        self.turns = 0

    def __call__(self, message, print_output=True):
        self.turns += 1
        return self.script(self, message)

    def call(self, tool, *args, **kwargs):
        return self.tools[tool].func(*args, **kwargs)


class ScriptedToolformer(Toolformer):
    """`script(conversation, message) -> str`, chosen per conversation category."""

    def __init__(self, scripts):
        self.scripts = scripts
        self.prompts = []

    def new_conversation(self, prompt, tools, category=None):
        self.prompts.append((category, prompt))
        script = self.scripts.get(category) or self.scripts["default"]
        return ScriptedConversation(script, prompt, tools, category)


def serve_receiver(answer, port, storage_dir, threaded=False):
    """agora-protocol 0.2.0's own Receiver and Flask ReceiverServer on 127.0.0.1:PORT, with
    the protocol checker saying YES and `answer(conversation, message)` as the model."""
    import logging
    import os

    from agora import Receiver, ReceiverServer

    toolformer = ScriptedToolformer(
        {
            "protocolChecking": lambda conversation, message: "The tools suffice. YES",
            "default": answer,
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
    server.run(host="127.0.0.1", port=port, threaded=threaded)
