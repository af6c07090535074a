"""A real webhook receiver on loopback for the notification tests: it verifies every request with
the Standard Webhooks library's own verifier and answers from a script of status codes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


@dataclass
class Received:
    webhook_id: str
    payload: dict[str, Any]
    answered: int
    path: str = ""  # the request target: path and query


@dataclass
class Receiver:
    """What arrived, in order. ``answers``: status codes for the next requests (then ``otherwise``)."""

    url: str
    secret: str = ""
    answers: list[int] = field(default_factory=list)
    otherwise: int = 204
    received: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted(self) -> list[Received]:
        return [r for r in self.received if 200 <= r.answered < 300]

    def types(self) -> list[str]:
        return [r.payload["type"] for r in self.accepted()]


@contextmanager
def webhook_receiver(secret: str = "") -> Iterator[Receiver]:
    receiver: Receiver | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert receiver is not None
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k: v for k, v in self.headers.items()}
            with receiver.lock:
                try:
                    payload = Webhook(receiver.secret).verify(body, headers) if receiver.secret else json.loads(body)
                except WebhookVerificationError as exc:
                    receiver.refused.append(str(exc))
                    status = 401
                else:
                    status = receiver.answers.pop(0) if receiver.answers else receiver.otherwise
                    receiver.received.append(Received(headers.get("webhook-id", ""), payload, status, self.path))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()
            receiver.arrived.set()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hooks", secret=secret)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
