"""What a governed exchange costs the whole stack, beside the kernel's own turn (issue 34):
``python -m bench.stack_cost``.

The production profile (``bench.loadstack``: PostgreSQL owned by a plain role, Redis, daphne and two
qclusters of two workers, the sweeper, ``SKALD_DEBUG=0``), a real HTTPS provider on loopback
(``tests/loop/providers/fake_openai_server.py``, trustme certificates, the OpenAI SSE wire format)
and K clients, each in a session of its own, that post a message and poll its exchange twice a
second until it settles, then post the next; then the same with clients that keep their session's
websocket open and wait for the exchange's settle event instead of polling (the documented path).
Each exchange is two model calls around one ungated tool (``search_knowledge``), the kernel bench's
turn shape.

CPU is read from ``/proc`` before and after the measured exchanges, summed over every process of
the stack: the launcher's tree (daphne, each qcluster's processes, the sweeper), every PostgreSQL
process (the postmaster's reaped backends included) and Redis. PostgreSQL and Redis are the
machine's own servers, so run this on a quiet machine: another client of theirs is counted too.
The provider and the clients run in this process and are not counted.

In the same run a :mod:`bench.kernel` child measures the kernel's PostgreSQL turn, and the ratio
is stack CPU per settled exchange over the kernel turn's median overhead (wall, as the issue states
its 14x) and over its CPU. Target: <= 3x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.typing import Origin

from bench.child_run import run_for_json
from bench.loadstack import ONE_TOOL_AGENT, BenchStack, start_stack
from bench.procstat import cpu_seconds, cpu_seconds_with_reaped, pids_named
from skald.core.child_env import hermetic_env
from tests.e2e.stack import TERMINAL
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Response,
    sse,
    text_chunks,
    tool_call_chunks,
)

TARGET_RATIO = 3.0
POLL_S = 0.5
SESSIONS = (8, 32)
EXCHANGES = {8: 12, 32: 4}  # measured exchanges per client, after one warm-up exchange each
KERNEL_TURNS = 200
KERNEL_DATABASE = os.environ.get("BENCH_STACK_KERNEL_URL", "postgres://postgres@127.0.0.1:5432/skald_bench_stack_kernel")
RUN_TIMEOUT_S = 600


def answer(request: RecordedRequest) -> Response:
    """The model: ask for the tool once, then answer from its result."""
    messages = request.body["messages"]
    if messages[-1]["role"] == "tool":
        return sse(text_chunks(f"found: {str(messages[-1]['content'])[:40]}"))
    return sse(tool_call_chunks([("call_search", "search_knowledge", json.dumps({"query": "502 after deploy"}))]))


def _role(cmdline: str) -> str:
    if "--serve" in cmdline or "daphne" in cmdline:
        return "daphne"
    if "qcluster" in cmdline:
        return "qcluster"
    if "--maintain" in cmdline or "sweeper" in cmdline:
        return "sweeper"
    return "launcher"


def read_cpu(bench: BenchStack) -> Counter[str]:
    """CPU seconds so far per role of the stack; reaped children count to their parent's role."""
    reading: Counter[str] = Counter()
    tree = bench.stack.remember_tree()
    reading["launcher"] += cpu_seconds_with_reaped([bench.stack.process.pid])
    for proc in tree:
        reading[_role(proc.cmdline)] += cpu_seconds_with_reaped([proc.pid])
    reading["postgres"] = cpu_seconds_with_reaped(pids_named("postgres"))
    reading["redis"] = cpu_seconds(pids_named("redis-server"))
    return reading


@dataclass
class Load:
    sessions: int
    clients: str = "poll"
    exchanges: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    wall_s: float = 0.0
    cpu_ms: dict[str, float] = field(default_factory=dict)

    @property
    def cpu_per_exchange_ms(self) -> float:
        return sum(self.cpu_ms.values()) / max(1, self.exchanges)

    @property
    def per_second(self) -> float:
        return self.exchanges / self.wall_s if self.wall_s else 0.0


async def _post(client: httpx.AsyncClient, session_id: int, index: int, load: Load) -> int:
    """Send the next message; its exchange's id."""
    posted = await client.post(f"/api/sessions/{session_id}/messages/", json={"content": f"message {index}"})
    assert posted.status_code == 202, posted.text
    load.requests += 1
    return int(posted.json()["id"])


def _settled(load: Load, outcome: object) -> None:
    load.exchanges += 1
    load.outcomes[str(outcome)] += 1


async def _client_loop(client: httpx.AsyncClient, session_id: int, count: int, load: Load) -> None:
    """Post, then poll the exchange every :data:`POLL_S` until it settles."""
    for index in range(count):
        exchange = await _post(client, session_id, index, load)
        while True:
            await asyncio.sleep(POLL_S)
            row = (await client.get(f"/api/sessions/{session_id}/exchanges/{exchange}/")).json()
            load.requests += 1
            if row["status"] in TERMINAL:
                break
        _settled(load, row.get("outcome"))


async def _websocket_loop(bench: BenchStack, client: httpx.AsyncClient, token: str, session_id: int, count: int,
                          load: Load) -> None:
    """Post, then wait on the session's websocket for the exchange's settle event: no polling."""
    url = f"{bench.stack.ws_url}/ws/sessions/{session_id}/?token={token}"
    async with connect(url, origin=Origin(bench.stack.base_url), max_size=None) as ws:
        for index in range(count):
            exchange = await _post(client, session_id, index, load)
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), RUN_TIMEOUT_S))
                if message.get("kind") == "control:exchange_settled" and message.get("exchange") in (None, exchange):
                    break
            _settled(load, message.get("payload", {}).get("outcome", "settled"))


async def _drive(bench: BenchStack, sessions: list[int], count: int, load: Load | None, clients: str) -> None:
    token = bench.token()
    async with bench.client(token) as client:
        load = load or Load(len(sessions))
        if clients == "websocket":
            await asyncio.gather(*(_websocket_loop(bench, client, token, sid, count, load) for sid in sessions))
        else:
            await asyncio.gather(*(_client_loop(client, sid, count, load) for sid in sessions))


def measure_load(bench: BenchStack, sessions: int, clients: str = "poll") -> Load:
    operator = bench.stack.api("operator")
    ids = [operator.create_session(agent=ONE_TOOL_AGENT["name"])["id"] for _ in range(sessions)]
    asyncio.run(_drive(bench, ids, 1, None, clients))  # warm-up: imports, pools, caches, TLS sessions
    load = Load(sessions, clients)
    before, started = read_cpu(bench), time.perf_counter()
    asyncio.run(_drive(bench, ids, EXCHANGES[sessions], load, clients))
    load.wall_s = time.perf_counter() - started
    after = read_cpu(bench)
    load.cpu_ms = {role: round((after[role] - before[role]) * 1000, 1) for role in after}
    return load


def measure_kernel(tmp: Path) -> dict[str, Any] | str:
    """One :mod:`bench.kernel` child on a fresh PostgreSQL database: its turn's median overhead and CPU."""
    from bench.__main__ import recreate_postgres_database

    if problem := recreate_postgres_database(KERNEL_DATABASE):
        return problem
    result_file = tmp / "kernel.json"
    env = hermetic_env(SKALD_VAR_DIR=str(tmp / "kernel"), SKALD_DEBUG="0", SKALD_LOG_LEVEL="WARNING",
                       DATABASE_URL=KERNEL_DATABASE)
    figures = run_for_json([sys.executable, "-m", "bench.kernel", "--turns", str(KERNEL_TURNS), "--result-file",
                            str(result_file)], env, result_file, RUN_TIMEOUT_S)
    if isinstance(figures, str):
        return figures
    return {"median_ms": figures["median_ms"], "cpu_median_ms": figures["cpu_median_ms"]}


def report(loads: Sequence[Load], kernel: dict[str, Any] | str) -> str:
    lines = ["stack cost per settled exchange (production profile: PostgreSQL, Redis, 2 qclusters x 2 workers, "
             f"DEBUG off; two model calls around one tool over HTTPS; clients poll every {POLL_S:g} s, or wait "
             "on the session's websocket)"]
    for load in loads:
        parts = ", ".join(f"{role} {ms / max(1, load.exchanges):.1f}" for role, ms in sorted(load.cpu_ms.items()))
        lines.append(f"  K={load.sessions:<3} {load.clients:9} {load.exchanges} exchanges in {load.wall_s:.1f} s: "
                     f"{load.per_second:.1f} exchanges/s; CPU {load.cpu_per_exchange_ms:.1f} ms per exchange "
                     f"({parts} ms); {load.requests / max(1, load.exchanges):.1f} requests per exchange; "
                     f"outcomes {dict(load.outcomes)}")
    if isinstance(kernel, str):
        lines.append(f"  kernel turn not measured ({kernel})")
        return "\n".join(lines)
    wall, cpu = float(kernel["median_ms"]), float(kernel["cpu_median_ms"])
    lines.append(f"  kernel PostgreSQL turn, same run: {wall:.2f} ms median overhead (wall), {cpu:.2f} ms CPU")
    for load in loads:
        ratio = load.cpu_per_exchange_ms / wall
        lines.append(f"  K={load.sessions:<3} {load.clients:9} stack / kernel turn: {ratio:.1f}x the turn's wall time "
                     f"{'PASS' if ratio <= TARGET_RATIO else 'FAIL'} (target <= {TARGET_RATIO:g}x), "
                     f"{load.cpu_per_exchange_ms / cpu:.1f}x its CPU")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="*", default=list(SESSIONS))
    parser.add_argument("--clients", nargs="*", choices=("poll", "websocket"), default=["poll", "websocket"])
    parser.add_argument("--no-kernel", action="store_true", help="skip the kernel turn (profiling runs)")
    parser.add_argument("--kernel", type=float, nargs=2, metavar=("MEDIAN_MS", "CPU_MS"),
                        help="the kernel PostgreSQL turn this run already measured (make bench passes its own)")
    parser.add_argument("--result-file", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="skald-stack-cost-") as name, \
            FakeOpenAIServer(host="127.0.0.1", default=answer, keep_alive=True) as provider:
        tmp = Path(name)
        (tmp / "secrets").mkdir()
        loads = []
        with start_stack(tmp, extra_env=provider.profile_env(tmp / "secrets")) as bench:
            for clients in args.clients:
                for sessions in args.sessions:
                    EXCHANGES.setdefault(sessions, max(2, 96 // sessions))
                    loads.append(measure_load(bench, sessions, clients))
        kernel: dict[str, Any] | str = "skipped"
        if args.kernel:
            kernel = {"median_ms": args.kernel[0], "cpu_median_ms": args.kernel[1]}
        elif not args.no_kernel:
            kernel = measure_kernel(tmp)
    text = report(loads, kernel)
    print(text, flush=True)
    if args.result_file:
        rows = [asdict(load) | {"cpu_per_exchange_ms": load.cpu_per_exchange_ms} for load in loads]
        args.result_file.write_text(json.dumps({"loads": rows, "kernel": kernel, "text": text}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
