"""A webhook receiver that verifies every request with the Standard Webhooks
library from PyPI (standardwebhooks), as a customer's receiver would.

    python stdwebhooks_receiver.py SECRETS_JSON LOG_JSONL

It listens on a free loopback port and prints "listening HOST:PORT" once.
SECRETS_JSON maps a request path to the secrets a receiver there holds
({"/a": ["whsec_…", …]}); it is read again for every request, so endpoints
may be added while it runs. Every request is appended to LOG_JSONL as one
JSON line: its path, headers (names lowercased), body (base64), arrival
(Unix seconds) and, per secret in order, "ok" or "refused: <the library's
reason>". It answers 200
when some secret verifies and 401 otherwise, except under /flaky/, where it
answers 500 to the first request of each webhook-id, so the sender retries.
"""

import base64
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

secrets_path, log_path = sys.argv[1], sys.argv[2]
lock = threading.Lock()
seen_ids = set()


def verdict(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
        return "ok"
    except WebhookVerificationError as e:
        return "refused: " + str(e)
    except Exception as e:  # a secret the library cannot read, a body it cannot parse
        return "error: %s: %s" % (type(e).__name__, e)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        with open(secrets_path) as f:
            secrets = json.load(f).get(self.path, [])
        verdicts = [verdict(s, body, headers) for s in secrets]
        status = 200 if "ok" in verdicts else 401
        with lock:
            if self.path.startswith("/flaky/") and status == 200:
                msg_id = headers.get("webhook-id")
                if msg_id not in seen_ids:
                    seen_ids.add(msg_id)
                    status = 500
            with open(log_path, "a") as log:
                log.write(json.dumps({
                    "path": self.path,
                    "headers": headers,
                    "body": base64.b64encode(body).decode(),
                    "verdicts": verdicts,
                    "status": status,
                    "at": time.time(),
                }) + "\n")
        answer = b'{"ok":true}' if status == 200 else b'{"ok":false}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print("listening %s:%d" % server.server_address[:2], flush=True)
server.serve_forever()
