"""A webhook receiving agora-node's A2A push notifications, standard library only.

Usage: webhook.py PORT LOG [--status CODE] [--fail-first N]

Listens on 127.0.0.1:PORT. Every POST is appended to LOG as one JSON line, flushed
before the answer: the path, the X-A2A-Notification-Token, Authorization and
Content-Type headers, the body as received (text), and the status answered. It
answers 200, or CODE with --status, or 503 to the first N requests with
--fail-first. Nothing is judged here: sdk_client.py's `deliveries` scenario
parses the bodies strictly with the SDK's own types, and the e2e test judges.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv):
    port, log, *flags = argv
    status = int(flags[flags.index("--status") + 1]) if "--status" in flags else 200
    fail_first = int(flags[flags.index("--fail-first") + 1]) if "--fail-first" in flags else 0
    lock = threading.Lock()
    seen = [0]

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            with lock:
                seen[0] += 1
                answered = 503 if seen[0] <= fail_first else status
                record = {
                    "path": self.path,
                    "token": self.headers.get("X-A2A-Notification-Token"),
                    "authorization": self.headers.get("Authorization"),
                    "contentType": self.headers.get("Content-Type"),
                    "body": raw.decode("utf-8", "replace"),
                    "answered": answered,
                }
                with open(log, "a", encoding="utf-8") as out:
                    out.write(json.dumps(record) + "\n")
                    out.flush()
            self.send_response(answered)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", int(port)), Hook).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
