"""Time from an approval's creation to a webhook receiver's first byte (issue 31).

A fresh, migrated database (SQLite or PostgreSQL, as the environment says); ``APPROVALS`` calls park
for an approver, each through the real kernel turn and gate (a scripted model asks to write a file);
an organisation webhook on loopback hears ``approval.pending``. The figure runs from the approval's
``created_at`` (stamped inside the park transaction) to the moment the receiver has the request's
headers: the rest of the park, the commit, the outbox row, rendering, signing and the HTTP round
trip. The send runs at commit in this process (``SKALD_SYNC_TASKS``), so the queue's hop to a worker
is not in the figure (with Redis it adds a broker round trip; with the ORM broker, its poll).

Target: p95 <= 1 s on the production profile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.kernel import percentile

APPROVALS = 40
WARMUP = 3
TARGET_P95_MS = 1000.0
WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\npool exhausted\n"})


@dataclass
class Figures:
    database: str
    approvals: int
    p50_ms: float
    p95_ms: float
    max_ms: float


class Receiver:
    """A loopback webhook receiver: when each message's headers arrived, by its webhook-id."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                at = time.time()  # the request line and headers are in: its first bytes
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.arrived[json.loads(body)["data"]["request_id"]] = at
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def measure(approvals: int) -> Figures:
    from django.contrib.auth.models import User
    from django.db import connection

    from approvals.models import PendingApproval
    from approvals.rules.seed import default_rules_ensure
    from audit.actors import Actor
    from loop.providers.loopback import LoopbackProvider, tool_turn
    from skald.agents.seed import seed_agents
    from skald.loop_adapters import runtime
    from skald.notifications.services import subscription_create
    from skald.sessions.services import session_create, session_message_submit

    seed_agents()
    default_rules_ensure()
    alice = User.objects.create_user("bench-alice", password="x")
    receiver = Receiver()
    subscription_create(actor=Actor.system("bench"), owner=None, data={
        "name": "bench", "channel": "webhook", "target": receiver.url, "events": ["approval.pending"]})
    runtime.set_provider_factory(lambda agent: LoopbackProvider([tool_turn(WRITE)]))
    latencies: list[float] = []
    try:
        for i in range(WARMUP + approvals):
            session = session_create(user=alice, agent="troubleshooter", title=f"bench {i}")
            session_message_submit(user=alice, session=session, content="investigate")
            approval = PendingApproval.objects.get(session=session)
            arrived = receiver.arrived[str(approval.request_id)]
            if i >= WARMUP:
                latencies.append((arrived - approval.created_at.timestamp()) * 1000)
    finally:
        runtime.set_provider_factory(None)
        receiver.server.shutdown()
    return Figures(database=connection.vendor, approvals=approvals, p50_ms=statistics.median(latencies),
                   p95_ms=percentile(latencies, 0.95), max_ms=max(latencies))


def report(figures: Figures) -> str:
    verdict = "PASS" if figures.p95_ms <= TARGET_P95_MS else "FAIL"
    return (f"approval created -> webhook receiver's first byte ({figures.database}, {figures.approvals} approvals, "
            f"send at commit): p50 {figures.p50_ms:.1f} ms, p95 {figures.p95_ms:.1f} ms ({verdict}, target <= "
            f"{TARGET_P95_MS:g} ms), max {figures.max_ms:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.notify_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--approvals", type=int, default=APPROVALS)
    parser.add_argument("--result-file", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("SKALD_SYNC_TASKS", "1")
    os.environ.setdefault("SKALD_NOTIFY_ALLOW_CIDRS", "127.0.0.0/8")
    from bench.kernel import configure_django

    configure_django()
    from django.conf import settings

    settings.SKALD_WORKSPACE_ROOT = Path(settings.VAR_DIR) / "workspace"
    figures = measure(args.approvals)
    print(report(figures), flush=True)
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(asdict(figures)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
