"""Event commit → websocket client latency, one profile per process (``make bench`` runs both).

This process plays the worker: it appends session events through the kernel's store (so the
wake goes out on commit, exactly as a qcluster worker's does) while daphne, a separate process,
serves the session websocket to a client in this process. One clock measures both ends: from the
commit of an event to the client receiving it. Events go one at a time, each after the previous
one arrived, with a jittered gap so the consumer's fallback poll is never in phase.

Embedded: SQLite and the local datagram layer. Redis: PostgreSQL and channels-redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

EVENTS = 200
BASE_DIR = Path(__file__).resolve().parent.parent


@dataclass
class Latency:
    profile: str
    layer: str
    events: int
    p50_ms: float
    p95_ms: float
    max_ms: float


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_port(port: int, daphne: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daphne.poll() is not None:
            raise RuntimeError(f"daphne exited {daphne.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError("daphne did not listen in time")


def _setup() -> tuple[int, str]:
    """Migrate, then one operator and one session; returns (session id, a JWT for the operator)."""
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from rest_framework_simplejwt.tokens import AccessToken

    from skald.core.roles import roles_ensure
    from skald.loop_adapters.store import kernel_store

    call_command("migrate", verbosity=0)
    roles_ensure()
    user = User.objects.create_user("alice", password="bench-only")
    user.groups.add(Group.objects.get(name="operator"))
    session = kernel_store().create_session(owner_id=user.pk, agent="troubleshooter", source="bench",
                                            title="latency", principal="user:alice")
    return session.pk, str(AccessToken.for_user(user))


async def _measure(port: int, session_id: int, token: str, events: int) -> list[float]:
    from django.db import transaction
    from websockets.asyncio.client import connect
    from websockets.typing import Origin

    from loop.events import EventKind
    from skald.loop_adapters.store import kernel_store

    store = kernel_store()
    committed: dict[int, float] = {}
    samples: list[float] = []

    def append(index: int) -> int:
        stamp: list[float] = []
        with transaction.atomic():
            transaction.on_commit(lambda: stamp.append(time.perf_counter()))  # before the store's wake
            event = store.append_event(session_id=session_id, kind=EventKind.NOTE, payload={"n": index},
                                       key=f"bench-{index}", principal="system:bench")
        committed[event.seq] = stamp[0]
        return event.seq

    url = f"ws://127.0.0.1:{port}/ws/sessions/{session_id}/?after=0&token={token}"
    async with connect(url, origin=Origin(f"http://127.0.0.1:{port}")) as ws:
        await asyncio.sleep(0.5)  # the consumer has joined its group
        for index in range(events):
            await asyncio.sleep(random.uniform(0.005, 0.05))
            seq = await asyncio.to_thread(append, index)
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if message.get("seq") == seq:
                    samples.append((time.perf_counter() - committed[seq]) * 1000)
                    break
    return samples


def run(profile: str, result_file: Path, events: int) -> None:
    import django

    from skald.core.var import var_dir_path, var_dir_prepare

    # Before Django starts: the var dir and its secret key, which daphne must share to accept our JWT.
    var_dir_prepare(var_dir_path(BASE_DIR))
    django.setup()
    from django.conf import settings

    session_id, token = _setup()
    port = _free_port()
    daphne = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                               "skald.asgi:application"], cwd=BASE_DIR, env=os.environ.copy(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port, daphne)
        samples = asyncio.run(_measure(port, session_id, token, events))
    finally:
        daphne.terminate()
        daphne.wait(timeout=20)
    ordered = sorted(samples)
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    result = Latency(profile=profile, layer=layer, events=len(samples), p50_ms=statistics.median(ordered),
                     p95_ms=ordered[int(0.95 * (len(ordered) - 1))], max_ms=ordered[-1])
    print(f"{profile}: {result.events} events over {layer}: p50 {result.p50_ms:.1f} ms, "
          f"p95 {result.p95_ms:.1f} ms, max {result.max_ms:.1f} ms", flush=True)
    result_file.write_text(json.dumps(asdict(result)), encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", required=True)
    parser.add_argument("--result-file", type=Path, required=True)
    parser.add_argument("--events", type=int, default=EVENTS)
    args = parser.parse_args()
    run(args.profile, args.result_file, args.events)
