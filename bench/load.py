"""The load test (issue 18): daphne + 2 qclusters on PostgreSQL + Redis, driven over loopback HTTP.

Phases, each bounded in count and time:
0. CPU per request: sequential ``POST …/messages/`` (one per fresh session) and ``GET …/events/?after=``;
   daphne's own CPU time (``/proc``) divided by the requests it served.
A. 32 concurrent sessions x 10 messages; each waits for its exchange to end before the next.
B. 50 closed-loop HTTP clients x 30 s: post a message, read ``events/?after=`` until it settles, again.

Throughout, a sampler counts the server connections to the benchmark database (``pg_stat_activity``,
by ``application_name``) against the configured ceiling. At the end: responses ≥ 500 (and dropped
connections), failed tool calls, broken and stuck exchanges, exchanges/s, admission→settled
percentiles (the exchange rows' own timestamps), HTTP p50/p99, CPU per request, peak connections.
The JSON report goes to ``var/bench/``. Run: ``python -m bench.load`` (``--cpu-only`` for phase 0).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.loadstack import BenchStack, start_stack
from bench.procstat import cpu_seconds

SESSIONS_A, MESSAGES_A = 32, 10
CLIENTS_B, SECONDS_B = 50, 30.0
CPU_POSTS, CPU_GETS, CPU_WARMUP = 60, 300, 5
PHASE_DEADLINE_S = 300.0  # a phase that has not finished by then is reported as incomplete
EXCHANGE_WAIT_S = 60.0
TERMINAL = {"settled", "broken"}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


@dataclass
class Traffic:
    statuses: Counter[int] = field(default_factory=Counter)
    dropped: int = 0
    latencies: list[float] = field(default_factory=list)
    by_method: dict[str, list[float]] = field(default_factory=dict)  # "POST" / "GET" → latencies
    server_errors: list[str] = field(default_factory=list)
    exchanges: list[int] = field(default_factory=list)

    def record(self, response: httpx.Response | None, started: float, what: str) -> None:
        took = time.perf_counter() - started
        self.latencies.append(took)
        self.by_method.setdefault(what.split(" ", 1)[0], []).append(took)
        if response is None:
            self.dropped += 1
            return
        self.statuses[response.status_code] += 1
        if response.status_code >= 500 and len(self.server_errors) < 20:
            self.server_errors.append(f"{what}: {response.status_code} {response.text[:200]}")

    @property
    def requests(self) -> int:
        return sum(self.statuses.values()) + self.dropped

    @property
    def bad(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500) + self.dropped


async def request(
    client: httpx.AsyncClient, traffic: Traffic, method: str, url: str, **kw: Any
) -> httpx.Response | None:
    started = time.perf_counter()
    try:
        response = await client.request(method, url, **kw)
    except httpx.HTTPError as exc:
        traffic.record(None, started, f"{method} {url}: {exc!r}")
        return None
    traffic.record(response, started, f"{method} {url}")
    return response


async def new_session(client: httpx.AsyncClient, traffic: Traffic) -> int:
    response = await request(client, traffic, "POST", "/api/sessions/", json={"agent": "bench"})
    assert response is not None and response.status_code == 201, response.text if response else "dropped"
    return int(response.json()["id"])


async def post(client: httpx.AsyncClient, traffic: Traffic, session: int, key: str, text: str) -> int | None:
    """Post one message; retries only what backpressure asks to retry (never counted as a pass)."""
    for _attempt in range(20):
        response = await request(client, traffic, "POST", f"/api/sessions/{session}/messages/",
                                 json={"content": text}, headers={"Idempotency-Key": key})
        if response is not None and response.status_code == 202:
            exchange = int(response.json()["id"])
            traffic.exchanges.append(exchange)
            return exchange
        if response is not None and response.status_code == 409:  # the previous one is still ending
            await asyncio.sleep(0.2)
            continue
        if response is not None and response.status_code == 503:
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
            continue
        return None
    return None


async def wait_exchange(client: httpx.AsyncClient, traffic: Traffic, session: int, exchange: int) -> str:
    deadline = time.monotonic() + EXCHANGE_WAIT_S
    while time.monotonic() < deadline:
        response = await request(client, traffic, "GET", f"/api/sessions/{session}/exchanges/{exchange}/")
        if response is not None and response.status_code == 200 and response.json()["status"] in TERMINAL | {"parked"}:
            return str(response.json()["status"])
        await asyncio.sleep(0.15)
    return "timeout"


async def read_until_settled(client: httpx.AsyncClient, traffic: Traffic, session: int, exchange: int,
                             after: int) -> int:
    """Closed loop: read ``events/?after=`` back to back until the exchange's settlement row."""
    deadline = time.monotonic() + EXCHANGE_WAIT_S
    while time.monotonic() < deadline:
        response = await request(client, traffic, "GET", f"/api/sessions/{session}/events/",
                                 params={"after": after})
        if response is None or response.status_code != 200:
            await asyncio.sleep(0.1)
            continue
        page = response.json()
        after = page["last_seq"]
        if any(e["kind"] == "control:exchange_settled" and e["exchange"] == exchange for e in page["results"]):
            return after
        if not page["results"]:
            # Nothing new: is it broken (no settlement row)? One cheap look, then read on.
            status = await request(client, traffic, "GET", f"/api/sessions/{session}/exchanges/{exchange}/")
            if status is not None and status.status_code == 200 and status.json()["status"] == "broken":
                return after
    return after


# --- phases -----------------------------------------------------------------------------------------


async def phase_cpu(stack: BenchStack, token: str) -> dict[str, Any]:
    traffic = Traffic()
    async with stack.client(token) as client:
        sessions = [await new_session(client, traffic) for _ in range(CPU_POSTS + CPU_WARMUP)]
        for index, session in enumerate(sessions[:CPU_WARMUP]):  # first-request costs: imports, caches
            await post(client, traffic, session, f"warm-{index}", f"warm-up {index}")
            await request(client, traffic, "GET", f"/api/sessions/{session}/events/", params={"after": 0})
        sessions = sessions[CPU_WARMUP:]
        before = cpu_seconds([stack.daphne_pid])
        for index, session in enumerate(sessions):
            await post(client, traffic, session, f"cpu-{index}", f"cpu probe {index}")
        post_cpu = (cpu_seconds([stack.daphne_pid]) - before) / CPU_POSTS
        for session, exchange in zip(sessions, traffic.exchanges[CPU_WARMUP:], strict=True):
            await wait_exchange(client, traffic, session, exchange)
        before = cpu_seconds([stack.daphne_pid])
        for index in range(CPU_GETS):
            await request(client, traffic, "GET", f"/api/sessions/{sessions[index % len(sessions)]}/events/",
                          params={"after": 0})
        get_cpu = (cpu_seconds([stack.daphne_pid]) - before) / CPU_GETS
    return {"post_messages_cpu_ms": post_cpu * 1000, "get_events_cpu_ms": get_cpu * 1000,
            "responses_5xx": traffic.bad, "statuses": dict(traffic.statuses)}


async def phase_sessions(stack: BenchStack, token: str) -> Traffic:
    traffic = Traffic()
    async with stack.client(token) as client:
        sessions = [await new_session(client, traffic) for _ in range(SESSIONS_A)]

        async def converse(session: int) -> None:
            for index in range(MESSAGES_A):
                exchange = await post(client, traffic, session, f"a-{session}-{index}", f"message {index}")
                if exchange is not None:
                    await wait_exchange(client, traffic, session, exchange)

        await asyncio.wait_for(asyncio.gather(*(converse(s) for s in sessions)), PHASE_DEADLINE_S)
    return traffic


async def phase_closed_loop(stack: BenchStack, token: str) -> Traffic:
    traffic = Traffic()
    async with stack.client(token) as client:
        sessions = [await new_session(client, traffic) for _ in range(CLIENTS_B)]
        deadline = time.monotonic() + SECONDS_B

        async def loop(session: int) -> None:
            after, index = 0, 0
            while time.monotonic() < deadline:
                exchange = await post(client, traffic, session, f"b-{session}-{index}", f"closed loop {index}")
                index += 1
                if exchange is not None:
                    after = await read_until_settled(client, traffic, session, exchange, after)

        await asyncio.wait_for(asyncio.gather(*(loop(s) for s in sessions)), SECONDS_B + PHASE_DEADLINE_S)
    return traffic


def summarize(name: str, traffic: Traffic, wall: float, stack: BenchStack, cpu: dict[str, float]) -> dict[str, Any]:
    rows = stack.exchange_rows(traffic.exchanges)
    latencies = [row["seconds"] for row in rows if row["seconds"] is not None]
    return {
        "phase": name, "wall_s": wall, "requests": traffic.requests, "statuses": dict(traffic.statuses),
        "responses_5xx_or_dropped": traffic.bad, "dropped": traffic.dropped, "server_errors": traffic.server_errors,
        "backpressure_503": traffic.statuses.get(503, 0),
        "exchanges": len(traffic.exchanges), "exchanges_per_s": len(latencies) / wall if wall else 0.0,
        "settled": sum(1 for row in rows if row["status"] == "settled"),
        "admission_to_settled_ms": {f"p{q}": pct(latencies, q) * 1000 for q in (50, 95, 99)},
        "http_ms": {f"p{q}": pct(traffic.latencies, q) * 1000 for q in (50, 99)},
        # POST …/messages/ (202) and GET …/events/?after= apart: the two HTTP figures.
        "http_ms_by_method": {method: {f"p{q}": pct(values, q) * 1000 for q in (50, 99)}
                              for method, values in sorted(traffic.by_method.items())},
        "daphne_cpu_ms_per_request": cpu["daphne"] * 1000 / max(1, traffic.requests),
        "worker_cpu_ms_per_exchange": cpu["workers"] * 1000 / max(1, len(traffic.exchanges)),
    }


def run(*, cpu_only: bool = False) -> dict[str, Any]:
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="skald-load-") as tmp, start_stack(Path(tmp)) as stack:
        report["config"] = stack.config
        token = stack.token()
        report["cpu_per_request"] = asyncio.run(phase_cpu(stack, token))
        print(f"CPU per request (daphne): POST messages {report['cpu_per_request']['post_messages_cpu_ms']:.2f} ms, "
              f"GET events {report['cpu_per_request']['get_events_cpu_ms']:.2f} ms", flush=True)
        if cpu_only:
            return report
        sampler = threading.Thread(target=stack.sample_connections, daemon=True)
        sampler.start()
        phases = []
        for name, phase in (("A: 32 sessions x 10 messages", phase_sessions),
                            ("B: 50 closed-loop clients x 30 s", phase_closed_loop)):
            cpu_before = stack.cpu()
            started = time.perf_counter()
            traffic = asyncio.run(phase(stack, token))
            wall = time.perf_counter() - started
            cpu_after = stack.cpu()
            cpu = {k: cpu_after[k] - cpu_before[k] for k in cpu_before}
            phases.append(summarize(name, traffic, wall, stack, cpu))
            print(json.dumps(phases[-1], indent=1), flush=True)
        stack.wait_all_terminal(EXCHANGE_WAIT_S)
        stack.sampling = False
        sampler.join(2)
        report["phases"] = phases
        report["store"] = stack.store_totals()
        report["connections"] = stack.connection_report()
    return report


def verdict(report: dict[str, Any]) -> list[str]:
    """The acceptance lines that failed (empty = all held)."""
    failed = []
    if any(p["responses_5xx_or_dropped"] for p in report["phases"]) or report["cpu_per_request"]["responses_5xx"]:
        failed.append("responses >= 500 or dropped connections")
    if report["store"]["failed_tool_calls"]:
        failed.append("failed tool calls")
    if report["store"]["stuck_exchanges"] or report["store"]["broken_exchanges"]:
        failed.append("stuck or broken exchanges")
    if report["connections"]["peak_total"] > report["connections"]["ceiling_total"]:
        failed.append("server connections above the configured pool ceiling")
    if report["connections"]["peak_by_role"].get("skald-web", 0) > report["config"]["web_pool_max"]:
        failed.append("web connections above SKALD_DB_POOL_MAX")
    return failed


def main(argv: list[str]) -> int:
    report = run(cpu_only="--cpu-only" in argv)
    out_dir = Path(__file__).resolve().parent.parent / "var" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"load-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    if "phases" in report:
        report["failed"] = verdict(report)
    out.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    print(table(report), flush=True)
    print(f"JSON: {out}", flush=True)
    return 1 if report.get("failed") else 0


def table(report: dict[str, Any]) -> str:
    cpu = report["cpu_per_request"]
    lines = [f"\n=== Load test ({report['cpus']} CPUs, load average {report['load_average_at_start']:.2f} at start; "
             "shared machine: wall-clock figures are noisy) ===",
             f"daphne CPU per request, sequential: POST messages {cpu['post_messages_cpu_ms']:.2f} ms, "
             f"GET events {cpu['get_events_cpu_ms']:.2f} ms"]
    for p in report.get("phases", []):
        a, h = p["admission_to_settled_ms"], p["http_ms"]
        lines.append(
            f"{p['phase']}: {p['requests']} requests, {p['responses_5xx_or_dropped']} >= 500 or dropped "
            f"(of them {p['backpressure_503']} backpressure 503s); "
            f"{p['exchanges']} exchanges ({p['settled']} settled), {p['exchanges_per_s']:.2f} exchanges/s; "
            f"admission->settled p50/p95/p99 {a['p50']:.0f}/{a['p95']:.0f}/{a['p99']:.0f} ms; "
            f"HTTP p50/p99 {h['p50']:.0f}/{h['p99']:.0f} ms ("
            + ", ".join(f"{m} {v['p50']:.0f}/{v['p99']:.0f}" for m, v in p.get("http_ms_by_method", {}).items())
            + "); "
            f"daphne CPU {p['daphne_cpu_ms_per_request']:.2f} ms/request; "
            f"worker CPU {p['worker_cpu_ms_per_exchange']:.1f} ms/exchange")
    if "store" in report:
        s, c = report["store"], report["connections"]
        lines.append(f"store: {s['failed_tool_calls']} failed tool calls of {s['tool_calls']}, "
                     f"{s['broken_exchanges']} broken, {s['stuck_exchanges']} stuck of {s['exchanges']} exchanges")
        lines.append(f"PostgreSQL connections: peak {c['peak_total']} (by role {c['peak_by_role']}), "
                     f"configured ceiling {c['ceiling_total']} ({c['ceiling_formula']})")
        failed = report["failed"]
        lines.append("acceptance: " + ("all held" if not failed else "FAILED: " + ", ".join(failed)))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
