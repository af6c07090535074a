"""``make bench``: :mod:`bench.tripwires`, :mod:`bench.policy_preview` and :mod:`bench.mcp_call` in process; then
:mod:`bench.kernel` on a fresh SQLite file, then on a fresh PostgreSQL database;
then :mod:`bench.peer`, the same turn through LangGraph checkpointing to the same databases, and
:mod:`bench.peer_dbos`, through a DBOS Transact workflow (both in the peers' virtualenv,
:mod:`bench.peer_runner`);
then :mod:`bench.tracing`, the kernel turn with OpenTelemetry on against off;
then :mod:`bench.stream_latency`, event commit → websocket client, in the embedded and Redis profiles;
then :mod:`bench.notify_latency`, approval created → webhook receiver's first byte, on each database;
then :mod:`bench.compaction` (a 2,000-turn session: request size and per-turn cost at turns 1, 500,
1,000 and 2,000) on each database;
then :mod:`bench.dojo`, issue 30's AgentDojo figures over the whole matrix (SQLite);
then :mod:`bench.scale`, K sessions x W qcluster workers through django-q2 and a worker's RSS;
then the load test (:mod:`bench.load`) against daphne + 2 qclusters on PostgreSQL + Redis.

Each run is a fresh process with a hermetic environment (no ``SKALD_*``/``DATABASE_URL`` from the
shell), so the two databases are measured under the same code and settings. Targets are reported
as PASS/FAIL for information only: the exit status is non-zero only when a run itself fails.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from bench import mcp_call as mcp_call_bench
from bench import notify_latency as notify_bench
from bench import policy_preview as policy_preview_bench
from bench import tripwires as tripwire_bench
from bench.child_run import run_for_json
from bench.kernel import TARGET_GROWTH, TARGET_MEDIAN_MS, Result, mark
from bench.peer_runner import PEER_POSTGRES_URL, run_peer
from bench.turn_shape import EDGE, TURNS, PeerResult
from skald.core.child_env import hermetic_env

BASE_DIR = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/skald_bench")
RUN_TIMEOUT_S = 150
STREAM_POSTGRES_URL = os.environ.get("BENCH_STREAM_POSTGRES_URL",
                                     "postgres://postgres@127.0.0.1:5432/skald_bench_stream")
STREAM_REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6")
STREAM_TARGET_P95_MS = {"embedded": 250.0, "redis": 50.0}
LOAD_TIMEOUT_S = 1200
SCALE_POSTGRES_URL = os.environ.get("BENCH_SCALE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/skald_bench_scale")
SCALE_TIMEOUT_S = 1500
NOTIFY_POSTGRES_URL = os.environ.get("BENCH_NOTIFY_POSTGRES_URL",
                                     "postgres://postgres@127.0.0.1:5432/skald_bench_notify")
BENCH_DIR = BASE_DIR / "var" / "bench"
STAMP = time.strftime("%Y%m%dT%H%M%S")
COMPACTION_TIMEOUT_S = 900
DOJO_TIMEOUT_S = 3600


def _env(var_dir: Path, database_url: str = "") -> dict[str, str]:
    # DEBUG off as in production: with it on, Django would also record every query it runs.
    env = hermetic_env(SKALD_VAR_DIR=str(var_dir), SKALD_DEBUG="0", SKALD_LOG_LEVEL="WARNING")
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


def recreate_postgres_database(url: str) -> str:
    """Drop and create the benchmark database; returns why not when the server is unreachable."""
    try:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    name = conninfo_to_dict(url).get("dbname")
    if not name:
        return f"{url} names no database"
    try:
        with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name))))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))
    except psycopg.Error as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return ""


def run_kernel(title: str, env: dict[str, str], result_file: Path) -> Result | str:
    """One :mod:`bench.kernel` process; its report streams through. Returns the figures or an error."""
    print(f"\n=== {title} ===", flush=True)
    figures = run_for_json([sys.executable, "-m", "bench.kernel", "--result-file", str(result_file)], env,
                           result_file, RUN_TIMEOUT_S)
    return figures if isinstance(figures, str) else Result(**figures)  # type: ignore[arg-type]


def run_tracing(env: dict[str, str], result_file: Path) -> dict[str, object] | str:
    """:mod:`bench.tracing`: the kernel turn with tracing on (OTLP/HTTP to a loopback receiver) vs off."""
    print("\n=== Tracing (issue 33): the kernel turn, OpenTelemetry on vs off, SQLite ===", flush=True)
    return run_for_json([sys.executable, "-m", "bench.tracing", "--result-file", str(result_file)], env,
                        result_file, RUN_TIMEOUT_S)


def run_stream(profile: str, env: dict[str, str], result_file: Path) -> dict[str, object] | str:
    print(f"\n=== Stream latency: {profile} ===", flush=True)
    env = {**env, "SKALD_ALLOWED_HOSTS": "127.0.0.1"}  # the websocket origin check
    return run_for_json([sys.executable, "-m", "bench.stream_latency", "--profile", profile,
                         "--result-file", str(result_file)], env, result_file, RUN_TIMEOUT_S)


def run_notify(tmp: str, *, postgres: bool) -> str:
    """:mod:`bench.notify_latency` on SQLite and on PostgreSQL (the production profile's database)."""
    print("\n=== Notification latency: approval created -> webhook receiver (issue 31) ===", flush=True)
    lines = ["approval created -> webhook receiver's first byte (send at commit; target p95 <= "
             f"{notify_bench.TARGET_P95_MS:g} ms on PostgreSQL)"]
    runs = [("SQLite", "")] + ([("PostgreSQL", NOTIFY_POSTGRES_URL)] if postgres else [])
    for name, url in runs:
        if url and (problem := recreate_postgres_database(url)):
            lines.append(f"  {name:10} not measured (unreachable: {problem})")
            continue
        result_file = Path(tmp) / f"notify-{name}.json"
        value = run_for_json([sys.executable, "-m", "bench.notify_latency", "--result-file", str(result_file)],
                             _env(Path(tmp) / f"notify-{name}", url), result_file, RUN_TIMEOUT_S)
        if isinstance(value, str):
            lines.append(f"  {name:10} not measured ({value})")
            continue
        p95 = float(str(value["p95_ms"]))
        lines.append(f"  {name:10} p50 {float(str(value['p50_ms'])):6.1f} ms   p95 {p95:6.1f} ms "
                     f"{mark(p95 <= notify_bench.TARGET_P95_MS)}   over {value['approvals']} approvals")
    if postgres:  # the production profile: the real stack, the queue and its workers included
        result_file = Path(tmp) / "notify-stack.json"
        value = run_for_json([sys.executable, "-m", "bench.notify_stack", "--result-file", str(result_file)],
                             dict(os.environ), result_file, RUN_TIMEOUT_S)
        if isinstance(value, str):
            lines.append(f"  {'stack':10} not measured ({value})")
        else:
            p95 = float(str(value["p95_ms"]))
            lines.append(f"  {'stack':10} p50 {float(str(value['p50_ms'])):6.1f} ms   p95 {p95:6.1f} ms "
                         f"{mark(p95 <= notify_bench.TARGET_P95_MS)}   over {value['approvals']} approvals "
                         f"({value['profile']})")
    return "\n".join(lines)


def stream_summary(results: dict[str, dict[str, object] | str]) -> str:
    lines = ["event commit -> websocket client (this process appends like a worker; daphne serves the client)"]
    for profile, value in results.items():
        target = STREAM_TARGET_P95_MS[profile]
        if isinstance(value, str):
            lines.append(f"  {profile:9} not measured ({value})")
            continue
        p95 = float(str(value["p95_ms"]))
        lines.append(f"  {profile:9} p50 {float(str(value['p50_ms'])):6.1f} ms   p95 {p95:6.1f} ms "
                     f"{mark(p95 <= target)} (target <= {target:g} ms)   max {float(str(value['max_ms'])):6.1f} ms"
                     f"   {value['events']} events over {value['layer']}")
    return "\n".join(lines)


def run_compaction(title: str, env: dict[str, str]) -> str:
    """One :mod:`bench.compaction` process; its report streams through. Returns an error or ""."""
    print(f"\n=== Compaction, 2,000 turns: {title} ===", flush=True)
    try:
        completed = subprocess.run([sys.executable, "-m", "bench.compaction"], cwd=BASE_DIR, env=env,
                                   timeout=COMPACTION_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {COMPACTION_TIMEOUT_S} s"
    return "" if completed.returncode == 0 else f"failed with exit status {completed.returncode}"


def run_dojo(env: dict[str, str]) -> str:
    """:mod:`bench.dojo` in a fresh process (its report streams through; its figures and every call
    go to ``var/bench/dojo-<time>.json``). Returns an error or ""."""
    print("\n=== AgentDojo against the provenance rules (issue 30, bench/dojo.py, SQLite) ===", flush=True)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    result_file = BENCH_DIR / f"dojo-{STAMP}.json"
    result = run_for_json([sys.executable, "-m", "bench.dojo", "--result-file", str(result_file)], env, result_file,
                          DOJO_TIMEOUT_S)
    return result if isinstance(result, str) else ""


def summary(results: dict[str, Result | str], peers: dict[str, PeerResult | str],
            dbos: dict[str, PeerResult | str] | None = None) -> str:
    """The closing table: one column per database, the targets on the right; then the peers'
    figures for the same turn (LangGraph, :mod:`bench.peer`; DBOS, :mod:`bench.peer_dbos`) beside
    them, and the kernel's ratio to the best of them (issue 34: at most 0.5x)."""
    dbos = dbos or {}
    columns = list(results)
    rows: list[tuple[str, dict[str, str], str]] = []

    def row(label: str, fmt: Callable[[Result], str], target: str = "") -> None:
        cells = {name: fmt(value) if isinstance(value, Result) else "-" for name, value in results.items()}
        rows.append((label, cells, target))

    def peer_row(label: str, fmt: Callable[[Result, PeerResult], str], target: str = "") -> None:
        cells = {}
        for name, value in results.items():
            peer = peers.get(name)
            cells[name] = fmt(value, peer) if isinstance(value, Result) and isinstance(peer, PeerResult) else "-"
        rows.append((label, cells, target))

    row("median overhead / one-tool turn",
        lambda r: f"{r.median_ms:.2f} ms {mark(r.median_ms <= r.target_median_ms)}",
        " / ".join(f"<= {TARGET_MEDIAN_MS[k]:g} ms {k}" for k in ("sqlite", "postgresql")))
    row("p95 overhead", lambda r: f"{r.p95_ms:.2f} ms")
    row("CPU per turn (this process)", lambda r: f"{r.cpu_median_ms:.2f} ms")
    row("machine speed (reference workload, CPU)", lambda r: f"{r.reference_ms:.2f} ms")
    row("CPU per turn in reference workloads", lambda r: f"{r.cpu_in_references:.2f}")
    row(f"mean of turns 1-{EDGE}", lambda r: f"{r.first_mean_ms:.2f} ms")
    row(f"mean of turns {TURNS - EDGE + 1}-{TURNS}", lambda r: f"{r.last_mean_ms:.2f} ms")
    row(f"growth turn {TURNS} / turn 1", lambda r: f"{r.growth:.2f}x {mark(r.growth <= TARGET_GROWTH)}",
        f"<= {TARGET_GROWTH}x")
    row("events persisted per second", lambda r: f"{r.events_per_s:,.0f}", ">= 1,500 postgresql")
    row("session events per turn", lambda r: f"{r.events / r.turns:.1f}")
    row("audit rows per turn", lambda r: f"{r.audit_rows_per_turn:.1f}")
    row("statements per turn", lambda r: str(r.queries_per_turn), "pinned by tests/skald/test_turn_statements.py")
    row("round trips per turn", lambda r: str(r.round_trips), "statements less those sent with a COMMIT")
    row("commits per turn", lambda r: str(r.commits))
    row("commit floor (probe x commits)", lambda r: f"{r.commit_floor_ms:.2f} ms")
    row("round-trip floor (probe x other round trips)", lambda r: f"{r.round_trip_floor_ms:.2f} ms")
    row("waiting on the database (overhead - CPU)", lambda r: f"{r.wait_median_ms:.2f} ms")
    row("audit chain verified", lambda r: "ok" if r.chain_ok else "BROKEN")
    peer_row("peer: LangGraph, sync checkpoints, median", lambda r, p: f"{p.median_ms:.2f} ms")
    peer_row(f"peer: mean of turns 1-{EDGE} (its short thread)", lambda r, p: f"{p.first_mean_ms:.2f} ms")
    peer_row(f"peer: growth turn {TURNS} / turn 1", lambda r, p: f"{p.growth:.2f}x")
    peer_row("peer: CPU per turn", lambda r, p: f"{p.cpu_median_ms:.2f} ms")
    peer_row("Skald's turn / the peer's, medians",
             lambda r, p: f"{r.median_ms / p.median_ms:.2f}x {mark(r.median_ms < p.median_ms)}",
             "< 1: cheaper than the peer (issue 14's title)")
    peer_row(f"Skald's turn / the peer's, turns 1-{EDGE}",
             lambda r, p: f"{r.first_mean_ms / p.first_mean_ms:.2f}x {mark(r.first_mean_ms < p.first_mean_ms)}",
             "< 1, against the peer's best case")

    def dbos_row(label: str, fmt: Callable[[PeerResult], str]) -> None:
        rows.append((label, {name: fmt(value) if isinstance(value := dbos.get(name), PeerResult) else "-"
                             for name in columns}, ""))

    def best(name: str) -> PeerResult | None:
        found = [p for p in (peers.get(name), dbos.get(name)) if isinstance(p, PeerResult)]
        return min(found, key=lambda p: p.median_ms) if found else None

    dbos_row("peer 2: DBOS workflow, median", lambda p: f"{p.median_ms:.2f} ms")
    dbos_row("peer 2: CPU per turn", lambda p: f"{p.cpu_median_ms:.2f} ms")
    cells = {}
    for name, value in results.items():
        top = best(name)
        cells[name] = (f"{value.median_ms / top.median_ms:.2f}x {mark(value.median_ms <= 0.5 * top.median_ms)}"
                       if isinstance(value, Result) and top is not None else "-")
    rows.append(("Skald's turn / the best peer's, medians", cells, "<= 0.5x (issue 34)"))

    width = max(len(label) for label, _cells, _target in rows) + 2
    col = max(16, *(len(c) + 2 for _l, cells, _t in rows for c in cells.values()))
    lines = [f"{'':{width}}" + "".join(f"{name:>{col}}" for name in columns) + "   target",
             f"{'':{width}}" + "".join(f"{'-' * (col - 2):>{col}}" for _ in columns)]
    for label, cells, target in rows:
        lines.append(f"{label:{width}}" + "".join(f"{cells[name]:>{col}}" for name in columns)
                     + (f"   {target}" if target else ""))
    for name, value in results.items():
        if isinstance(value, str):
            lines.append(f"{name}: not measured ({value})")
    for name, peer in [*peers.items(), *((f"{k} (DBOS)", v) for k, v in dbos.items())]:
        if isinstance(peer, str):
            lines.append(f"peer on {name}: not measured ({peer})")
    lines.append("Overhead = wall time of run_turns_keyed minus the time inside the provider's stream; "
                 "one turn = user message -> one echo call -> answer (2 provider calls).")
    lines.append("PASS/FAIL is informative only. Wall-clock figures move with the machine's load (see above).")
    return "\n".join(lines)


def main() -> int:
    started = time.perf_counter()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Skald kernel benchmark: {TURNS} one-tool turns per database, loopback provider, real store and "
          f"audit chain.\nPython {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {load:.2f} at start.", flush=True)
    print("\n=== Credential tripwires (SPEC L16, in process, no database) ===", flush=True)
    print(tripwire_bench.report(), flush=True)
    print("\n=== Policy impact preview (issue 32, in process, no database) ===", flush=True)
    print(policy_preview_bench.report(), flush=True)
    print("\n=== MCP call vs a built-in tool (issue 29, no database; each server a process of its own) ===", flush=True)
    print(mcp_call_bench.report(), flush=True)
    results: dict[str, Result | str] = {}
    with tempfile.TemporaryDirectory(prefix="skald-bench-") as tmp:
        sqlite_dir = Path(tmp) / "sqlite"
        results["SQLite"] = run_kernel("SQLite (fresh file, WAL)", _env(sqlite_dir), Path(tmp) / "sqlite.json")

        problem = recreate_postgres_database(POSTGRES_URL)
        if problem:
            print(f"\n=== PostgreSQL ===\nPostgreSQL at {POSTGRES_URL} is not reachable, skipped: {problem}",
                  flush=True)
            results["PostgreSQL"] = f"unreachable: {problem}"
        else:
            results["PostgreSQL"] = run_kernel(f"PostgreSQL ({POSTGRES_URL}, recreated)",
                                               _env(Path(tmp) / "postgres", POSTGRES_URL),
                                               Path(tmp) / "postgres.json")
        peers: dict[str, PeerResult | str] = {"SQLite": run_peer("SQLite", "sqlite", Path(tmp) / "peer-sqlite.json")}
        dbos: dict[str, PeerResult | str] = {
            "SQLite": run_peer("SQLite", "sqlite", Path(tmp) / "dbos-sqlite.json", "bench.peer_dbos")}
        if not isinstance(results["PostgreSQL"], str) and not recreate_postgres_database(PEER_POSTGRES_URL):
            peers["PostgreSQL"] = run_peer(f"PostgreSQL ({PEER_POSTGRES_URL}, recreated)", PEER_POSTGRES_URL,
                                           Path(tmp) / "peer-postgres.json")
        if not isinstance(results["PostgreSQL"], str) and not recreate_postgres_database(PEER_POSTGRES_URL):
            dbos["PostgreSQL"] = run_peer(f"PostgreSQL ({PEER_POSTGRES_URL}, recreated)", PEER_POSTGRES_URL,
                                          Path(tmp) / "dbos-postgres.json", "bench.peer_dbos")
        streams: dict[str, dict[str, object] | str] = {
            "embedded": run_stream("embedded", _env(Path(tmp) / "stream-embedded"), Path(tmp) / "stream-e.json")}
        problem = recreate_postgres_database(STREAM_POSTGRES_URL)
        streams["redis"] = f"unreachable: {problem}" if problem else run_stream(
            "redis", {**_env(Path(tmp) / "stream-redis", STREAM_POSTGRES_URL), "REDIS_URL": STREAM_REDIS_URL},
            Path(tmp) / "stream-r.json")
        tracing = run_tracing(_env(Path(tmp) / "tracing"), Path(tmp) / "tracing.json")
        notify = run_notify(tmp, postgres=not isinstance(results["PostgreSQL"], str))
        stack_cost = run_stack_cost(results["PostgreSQL"], Path(tmp) / "stack-cost.json")
        compaction = {"SQLite": run_compaction("SQLite (fresh file, WAL)", _env(Path(tmp) / "c-sqlite"))}
        if not isinstance(results["PostgreSQL"], str) and not recreate_postgres_database(POSTGRES_URL):
            compaction["PostgreSQL"] = run_compaction(f"PostgreSQL ({POSTGRES_URL}, recreated)",
                                                      _env(Path(tmp) / "c-postgres", POSTGRES_URL))
        dojo = run_dojo(_env(Path(tmp) / "dojo"))
    scale = run_scale()
    print(f"\n=== Summary ({time.perf_counter() - started:.0f} s, load average {load:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} now) ===", flush=True)
    print(summary(results, peers, dbos), flush=True)
    print(stream_summary(streams), flush=True)
    print(notify, flush=True)
    print(stack_cost, flush=True)
    print(scale_summary(scale), flush=True)
    write_json(load, results, {**{f"langgraph {k}": v for k, v in peers.items()},
                               **{f"dbos {k}": v for k, v in dbos.items()}}, streams, scale)
    failed = [name for name, value in [*results.items(), *streams.items(), ("scale", scale)]
              if isinstance(value, str) and not value.startswith("unreachable")]
    failed += [f"compaction on {name}" for name, problem in compaction.items() if problem]
    failed += ["tracing"] if isinstance(tracing, str) else []
    failed += [f"agentdojo ({dojo})"] if dojo else []
    if run_load() != 0:
        failed.append("load test")
    return 1 if failed else 0


def run_stack_cost(kernel: Result | str, result_file: Path) -> str:
    """:mod:`bench.stack_cost`: CPU per settled exchange over every process of the production stack,
    against the kernel PostgreSQL turn this run measured (issue 34). Returns its report's text."""
    print("\n=== Stack cost per exchange vs the kernel's turn (issue 34, bench/stack_cost.py) ===", flush=True)
    if isinstance(kernel, str):
        return f"stack cost: not measured (the kernel's PostgreSQL turn was not: {kernel})"
    value = run_for_json([sys.executable, "-m", "bench.stack_cost", "--kernel", str(kernel.median_ms),
                          str(kernel.cpu_median_ms), "--result-file", str(result_file)], dict(os.environ),
                         result_file, LOAD_TIMEOUT_S)
    return f"stack cost: not measured ({value})" if isinstance(value, str) else str(value["text"])


def run_scale() -> dict[str, object] | str:
    """K sessions x W qcluster workers through django-q2 (bench/scale.py), and worker RSS."""
    print("\n=== Scale: K sessions x W workers, PostgreSQL + Redis (bench/scale.py) ===", flush=True)
    problem = recreate_postgres_database(SCALE_POSTGRES_URL)
    if problem:
        return f"unreachable: {problem}"
    result_file = BENCH_DIR / f"scale-{STAMP}.json"
    env = {**os.environ, "BENCH_SCALE_DATABASE_URL": SCALE_POSTGRES_URL}
    try:
        completed = subprocess.run([sys.executable, "-m", "bench.scale", "--result-file", str(result_file)],
                                   cwd=BASE_DIR, env=env, timeout=SCALE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {SCALE_TIMEOUT_S} s"
    if not result_file.exists():
        return f"failed with exit status {completed.returncode}"
    figures = dict(json.loads(result_file.read_text(encoding="utf-8")))
    return figures if completed.returncode == 0 else f"failed with exit status {completed.returncode}"


def scale_summary(scale: dict[str, object] | str) -> str:
    if isinstance(scale, str):
        return f"scale: not measured ({scale})"
    from bench.scale import Point, Report, table

    report = Report(**{**scale, "points": [Point(**p) for p in scale["points"]]})  # type: ignore[arg-type, union-attr, attr-defined]
    return table(report)


def write_json(load: float, results: dict[str, Result | str], peers: dict[str, PeerResult | str],
               streams: dict[str, dict[str, object] | str], scale: dict[str, object] | str) -> None:
    """The figures of this run, comparable with later ones (``var/bench/bench-<time>.json``)."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    figures = {
        "time": STAMP, "load_average_at_start": load, "cpus": os.cpu_count(),
        "kernel": {name: asdict(value) if isinstance(value, Result) else value for name, value in results.items()},
        "peer": {name: asdict(value) if isinstance(value, PeerResult) else value for name, value in peers.items()},
        "stream": streams, "scale": scale,
    }
    path = BENCH_DIR / f"bench-{STAMP}.json"
    path.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    print(f"JSON: {path}", flush=True)


def run_load() -> int:
    """The load test (bench/load.py): daphne + 2 qclusters on PostgreSQL + Redis, loopback only.
    Its acceptance lines (no 5xx, no failed tool call, nothing stuck, connections within the
    pool ceiling) decide its exit status."""
    print("\n=== Load test (bench/load.py) ===", flush=True)
    try:
        return subprocess.run([sys.executable, "-m", "bench.load"], cwd=BASE_DIR, timeout=LOAD_TIMEOUT_S,
                              check=False).returncode
    except subprocess.TimeoutExpired:
        print(f"the load test did not finish within {LOAD_TIMEOUT_S} s", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
