"""The kernel benchmark on the database the environment selects (``DATABASE_URL``, else SQLite).

One bench turn is one exchange through :func:`loop.driver.run_turns_keyed` on the real store and
audit chain: a user message → the model asks for one ``echo`` call → the tool runs → the model
answers. The provider is a :class:`LoopbackProvider`; the wall time spent inside its ``stream`` is
measured and subtracted, so what is left is the kernel's overhead (admission, claim, context,
dispatch, every durable write and audit row, the tool thread, the receipt).

Run it through ``python -m bench``, which gives it a fresh database in a fresh process. Run alone,
``python -m bench.kernel --result-file out.json`` writes into whatever database the environment
names, so point ``SKALD_VAR_DIR`` (or ``DATABASE_URL``) at a throwaway one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.turn_shape import EDGE, TURNS, WARMUP_TURNS, ends
from loop.cancellation import CancelToken
from loop.compaction.extractive import extractive_summary
from loop.compaction.prompt import is_summary_request
from loop.outcomes import Completed
from loop.ports import AgentSpec, GateCall, GateVerdict, ToolContext, TurnScope
from loop.providers.base import Delta, ProviderRequest, ToolResultMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.tools.registry import FunctionTool, ToolRegistry

if TYPE_CHECKING:
    from loop.driver import LoopEnv
    from loop.models import Session

# Modules that touch the ORM (loop.driver, loop.store, skald.*, audit.*) are imported inside the
# functions below: they need ``django.setup()``, which runs only once the process is configured.

TARGET_MEDIAN_MS = {"sqlite": 4.0, "postgresql": 6.0}
TARGET_GROWTH = 1.2


def configure_django() -> None:
    """``django.setup()`` and a migrated database. Call before importing anything ORM-bound."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    import django
    from django.core.management import call_command

    from skald.core.var import var_dir_path, var_dir_prepare

    # As manage.py and the launcher do: settings read the var dir (SQLite file, keys), never make it.
    var_dir_prepare(var_dir_path(Path(__file__).resolve().parent.parent))
    django.setup()
    call_command("migrate", verbosity=0)


# --- the scripted model, timed ------------------------------------------------------------------


class TimedProvider:
    """Wraps a provider and accumulates the wall time spent producing its deltas.

    The time of ``stream()`` itself and of every ``next()`` on its iterator counts as provider
    time; the time the kernel spends between deltas does not.
    """

    def __init__(self, inner: LoopbackProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        started = time.perf_counter()
        try:
            deltas = iter(self.inner.stream(request, cancel=cancel))
        finally:
            self.seconds += time.perf_counter() - started
        return self._timed(deltas)

    def _timed(self, deltas: Iterator[Delta]) -> Iterator[Delta]:
        while True:
            started = time.perf_counter()
            try:
                delta = next(deltas)
            except StopIteration:
                self.seconds += time.perf_counter() - started
                return
            self.seconds += time.perf_counter() - started
            yield delta


def one_tool_exchange(request: ProviderRequest) -> list[Delta]:
    """Ask for one ``echo`` call, then answer once its result is in the context; asked to compact
    (a long session crosses the row trigger), write the deterministic extractive summary."""
    if is_summary_request(request):
        return text_turn(extractive_summary(request.messages[0].content))
    if request.messages and isinstance(request.messages[-1], ToolResultMessage):
        return text_turn("done")
    return tool_turn(("echo", {"text": "ping"}))


def bench_provider() -> TimedProvider:
    return TimedProvider(LoopbackProvider([one_tool_exchange], repeat_last=True))


# --- the environment -----------------------------------------------------------------------------


def _echo(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return f"echo: {arguments.get('text', '')}"


ECHO = FunctionTool("echo", "Echo text back.", {"type": "object", "properties": {"text": {"type": "string"}}},
                    _echo, concurrency_safe=True)


class AllowGate:
    """Allows every scoped call: the benchmark measures the loop, not a policy engine."""

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        return GateVerdict("allow") if scope is not None else GateVerdict("deny", "no scope")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        raise AssertionError("the benchmark never parks a call")


def create_session(owner_id: int, title: str) -> Session:
    from skald.loop_adapters.store import kernel_store

    return kernel_store().create_session(owner_id=owner_id, agent="bench", source="web", title=title,
                                         principal=f"user:{owner_id}")


def build_env(session: Session, provider: TimedProvider, workspace: Path) -> LoopEnv:
    """A LoopEnv as the product builds one: the real store, audit sink, clock and bus."""
    from loop.driver import LoopEnv
    from skald.loop_adapters.bus import ChannelsBus
    from skald.loop_adapters.store import kernel_store

    tools = ToolRegistry([ECHO])
    agent = AgentSpec(name="bench", kind="chat", system_prompt="You benchmark.", tools=tools.names(), client="")
    scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{session.owner_id}",
                      user_id=session.owner_id, agent="bench", workspace=workspace)
    return LoopEnv(store=kernel_store(), provider=provider, tools=tools, gate=AllowGate(), agent=agent,
                   scope=scope, bus=ChannelsBus())


CPU_SECONDS: list[float] = []  # this process's CPU time (every thread) per bench turn, in order


def run_turn(env: LoopEnv, provider: TimedProvider, number: int) -> tuple[float, float]:
    """One bench turn; returns ``(wall seconds, provider seconds)`` and appends its CPU seconds
    to ``CPU_SECONDS``."""
    from loop.driver import run_turns_keyed

    provider.inner.calls.clear()  # the call log would otherwise grow for the whole run
    before = provider.seconds
    cpu = time.process_time()
    started = time.perf_counter()
    result = run_turns_keyed(env, request_key=f"bench-{number}", content=f"ping {number}")
    wall = time.perf_counter() - started
    CPU_SECONDS.append(time.process_time() - cpu)
    if not isinstance(result.outcome, Completed):
        raise RuntimeError(f"bench turn {number} ended {result.outcome!r}, not completed")
    return wall, provider.seconds - before


# --- measuring -----------------------------------------------------------------------------------


@dataclass
class Result:
    backend: str
    server: str
    turns: int
    median_ms: float
    p95_ms: float
    mean_ms: float
    first_mean_ms: float
    last_mean_ms: float
    growth: float
    first_median_ms: float
    last_median_ms: float
    provider_median_ms: float
    events: int
    events_per_s: float
    audit_rows_per_turn: float
    queries_per_turn: int
    query_kinds: dict[str, int]
    chain_ok: bool
    sent_with_commit: int = 0  # statements per turn that travelled with a COMMIT (one round trip for both)
    commit_ms: float = 0.0
    round_trip_ms: float = 0.0  # one statement's round trip inside a transaction (probe)
    wait_median_ms: float = 0.0  # per turn: overhead minus this process's CPU (waiting on the database)
    cpu_median_ms: float = 0.0  # this process's CPU per turn: less sensitive to a loaded machine than wall time
    load_average: float = 0.0
    reference_ms: float = 0.0  # this machine's speed: median CPU ms of bench/machine.py's fixed workload
    reference_readings: list[float] = field(default_factory=list)  # before, between blocks of turns, after
    edge: int = EDGE
    warmup: int = WARMUP_TURNS
    blocks_ms: list[float] = field(default_factory=list)
    migrate_s: float = 0.0
    run_s: float = 0.0

    @property
    def target_median_ms(self) -> float:
        return TARGET_MEDIAN_MS.get(self.backend, TARGET_MEDIAN_MS["postgresql"])

    @property
    def cpu_in_references(self) -> float:
        """CPU per turn in reference workloads: the turn's own cost, whatever the machine's speed."""
        return self.cpu_median_ms / self.reference_ms if self.reference_ms else 0.0

    @property
    def commits(self) -> int:
        return self.query_kinds.get("COMMIT", 0)

    @property
    def commit_floor_ms(self) -> float:
        """The commit probe times the turn's commits: what the disk alone costs a turn."""
        return self.commit_ms * self.commits

    @property
    def round_trips(self) -> int:
        """The turn's round trips: its statements, less those that travelled with a COMMIT."""
        return self.queries_per_turn - self.sent_with_commit

    @property
    def round_trip_floor_ms(self) -> float:
        """The round-trip probe times the turn's round trips other than its commits."""
        return self.round_trip_ms * (self.round_trips - self.commits)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (``fraction`` in 0..1)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _server() -> tuple[str, str]:
    from django.db import connection

    if connection.vendor == "sqlite":
        import sqlite3

        return "sqlite", f"SQLite {sqlite3.sqlite_version} (WAL, synchronous=NORMAL)"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
        cursor.execute("SHOW synchronous_commit")
        sync = cursor.fetchone()[0]
    return connection.vendor, f"PostgreSQL {version} (synchronous_commit={sync})"


def _sample_queries(owner_id: int, provider: TimedProvider, workspace: Path) -> tuple[int, dict[str, int], int]:
    """The statements of one plain exchange: the second on a fresh session (the first fills the
    process's context window), as ``tests/skald/test_turn_statements.py`` pins them. Not a turn of
    the long session: every so often one of those also compacts, and would be counted as typical.

    Also how many of the third exchange's statements travelled with a COMMIT (PostgreSQL: one
    psycopg pipeline each, ``loop.sql.sent_with_commit``), which Django's query capture turns off:
    a turn's round trips are its statements minus those."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    env = build_env(create_session(owner_id, "sampled"), provider, workspace)
    run_turn(env, provider, 1)
    with CaptureQueriesContext(connection) as captured:
        run_turn(env, provider, 2)
    kinds = Counter(query["sql"].split(None, 1)[0].upper() for query in captured.captured_queries)
    with_commit = 0
    if connection.vendor == "postgresql":
        import psycopg

        real = psycopg.Connection.pipeline

        def counted(conn: psycopg.Connection[Any]) -> Any:
            nonlocal with_commit
            with_commit += 1
            return real(conn)

        psycopg.Connection.pipeline = counted  # type: ignore[method-assign, assignment]
        try:
            run_turn(env, provider, 3)
        finally:
            psycopg.Connection.pipeline = real  # type: ignore[method-assign]
    return len(captured.captured_queries), dict(kinds.most_common()), with_commit


def commit_probe(samples: int = 100) -> float:
    """Median milliseconds of the smallest durable transaction (one-row INSERT + COMMIT): the floor
    each of a turn's commits pays on this database and disk, whatever the kernel does."""
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_commit_probe (x integer)")
    timings = []
    for number in range(samples):
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_commit_probe (x) VALUES (%s)", [number])
        timings.append(time.perf_counter() - started)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_commit_probe")
    return statistics.median(timings) * 1000


def round_trip_probe(samples: int = 2000) -> float:
    """Median milliseconds of one statement that asks the server for nothing (``SELECT 1``) inside an
    open transaction, through Django's cursor as the store's statements go: what each of a turn's
    statements pays before the server does any work. On SQLite it is an in-process call."""
    from django.db import connection, transaction

    timings = []
    with transaction.atomic(), connection.cursor() as cursor:
        for _ in range(samples):
            started = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchone()
            timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


def measure(*, turns: int = TURNS, warmup: int = WARMUP_TURNS, workspace: Path) -> Result:
    """Warm up on one session, then time ``turns`` bench turns on a fresh one."""
    from django.contrib.auth import get_user_model

    from audit.models import AuditEvent
    from audit.services import chain_verify
    from bench.machine import reference_ms
    from loop.models import SessionEvent

    backend, server = _server()
    readings = [reference_ms()]  # the host's speed may move during the run: read it again between blocks
    commit_ms = commit_probe()
    round_trip_ms = round_trip_probe()
    user = get_user_model().objects.create_user(username="alice")
    provider = bench_provider()

    warm = build_env(create_session(user.pk, "warm-up"), provider, workspace)
    for number in range(1, warmup + 1):
        run_turn(warm, provider, number)

    session = create_session(user.pk, "long session")
    env = build_env(session, provider, workspace)
    audit_before = AuditEvent.objects.count()
    overhead: list[float] = []
    provider_times: list[float] = []
    CPU_SECONDS.clear()
    reading_every, reading_s = max(1, turns // 8), 0.0
    started = time.perf_counter()
    for number in range(1, turns + 1):
        wall, in_provider = run_turn(env, provider, number)
        overhead.append(wall - in_provider)
        provider_times.append(in_provider)
        if number % reading_every == 0:
            reading_started = time.perf_counter()
            readings.append(reference_ms(samples=3))
            reading_s += time.perf_counter() - reading_started
    run_s = time.perf_counter() - started - reading_s
    cpu_median_ms = statistics.median(CPU_SECONDS) * 1000
    wait_median_ms = statistics.median(max(0.0, o - c) for o, c in zip(overhead, CPU_SECONDS, strict=True)) * 1000
    audit_rows = AuditEvent.objects.count() - audit_before
    events = SessionEvent.objects.filter(session=session).count()

    queries, kinds, with_commit = _sample_queries(user.pk, provider, workspace)
    chain_ok = chain_verify().ok

    ms = [value * 1000 for value in overhead]
    edge, first, last = ends(ms)
    block = max(1, turns // 8)
    blocks = [round(statistics.fmean(ms[i:i + block]), 3) for i in range(0, turns, block)]
    return Result(
        backend=backend, server=server, turns=turns,
        median_ms=statistics.median(ms), p95_ms=percentile(ms, 0.95), mean_ms=statistics.fmean(ms),
        first_mean_ms=first, last_mean_ms=last, growth=last / first,
        first_median_ms=statistics.median(ms[:edge]), last_median_ms=statistics.median(ms[-edge:]),
        provider_median_ms=statistics.median(provider_times) * 1000,
        events=events, events_per_s=events / sum(overhead), audit_rows_per_turn=audit_rows / turns,
        queries_per_turn=queries, query_kinds=kinds, sent_with_commit=with_commit, chain_ok=chain_ok,
        commit_ms=commit_ms,
        round_trip_ms=round_trip_ms, wait_median_ms=wait_median_ms,
        edge=edge, warmup=warmup, blocks_ms=blocks, run_s=run_s, cpu_median_ms=cpu_median_ms,
        load_average=os.getloadavg()[0], reference_ms=statistics.median(readings),
        reference_readings=[round(value, 2) for value in readings],
    )


# --- reporting -----------------------------------------------------------------------------------


def mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(result: Result) -> str:
    target = result.target_median_ms
    block = max(1, result.turns // len(result.blocks_ms)) if result.blocks_ms else 1
    curve = "  ".join(f"{i * block + 1}-{(i + 1) * block}: {v:.2f}" for i, v in enumerate(result.blocks_ms))
    kinds = ", ".join(f"{k} {v}" for k, v in result.query_kinds.items())
    chain = "ok" if result.chain_ok else "BROKEN"
    commits = result.commits
    return "\n".join([
        f"  database             {result.server}",
        f"  turns                {result.turns} one-tool turns on one session (+ {result.warmup} warm-up turns)",
        f"  overhead median      {result.median_ms:.2f} ms   target <= {target:g} ms  "
        f"[{mark(result.median_ms <= target)}]",
        f"  CPU per turn         {result.cpu_median_ms:.2f} ms median (this process, every thread; load average "
        f"{result.load_average:.2f} at the end)",
        f"  machine speed        {result.reference_ms:.2f} ms CPU for bench/machine.py's reference workload "
        f"(median of {len(result.reference_readings)} readings during the run, "
        f"{min(result.reference_readings, default=0):.2f}-{max(result.reference_readings, default=0):.2f} ms); "
        f"CPU per turn = {result.cpu_in_references:.2f} reference workloads",
        f"  overhead p95         {result.p95_ms:.2f} ms   (mean {result.mean_ms:.2f} ms; "
        f"provider time excluded, median {result.provider_median_ms:.3f} ms)",
        f"  turns 1-{result.edge} mean       {result.first_mean_ms:.2f} ms",
        f"  turns {result.turns - result.edge + 1}-{result.turns} mean   {result.last_mean_ms:.2f} ms",
        f"  growth turn {result.turns} / 1   {result.growth:.2f}x     target <= {TARGET_GROWTH}x  "
        f"[{mark(result.growth <= TARGET_GROWTH)}]   (medians {result.first_median_ms:.2f} -> "
        f"{result.last_median_ms:.2f} ms, {result.last_median_ms / result.first_median_ms:.2f}x, "
        "less sensitive to load)",
        f"  growth curve (ms)    {curve}",
        f"  events persisted     {result.events} session events ({result.events / result.turns:.1f} per turn), "
        f"{result.events_per_s:,.0f} events/s of kernel time",
        f"  audit rows per turn  {result.audit_rows_per_turn:.1f}   (chain verified: {chain})",
        f"  queries per turn     {result.queries_per_turn}   ({kinds}); {result.round_trips} round trips "
        f"({result.sent_with_commit} statements travel with a COMMIT)",
        f"  commit floor         {result.commit_ms:.2f} ms per one-row durable transaction (probe) x "
        f"{commits} commits per turn = {result.commit_floor_ms:.2f} ms",
        f"  round-trip floor     {result.round_trip_ms * 1000:.0f} us per statement (SELECT 1 probe) x "
        f"{result.round_trips - commits} other round trips = {result.round_trip_floor_ms:.2f} ms",
        f"  time split           {result.cpu_median_ms:.2f} ms CPU in this process + {result.wait_median_ms:.2f} ms "
        "waiting (medians per turn; waiting = overhead - CPU: the server's work, its flushes and the round trips)",
        f"  timings              migrate {result.migrate_s:.1f} s, {result.turns} turns {result.run_s:.1f} s wall",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernel", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--warmup", type=int, default=WARMUP_TURNS)
    parser.add_argument("--result-file", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.turns < 2:
        parser.error("--turns must be at least 2")

    started = time.perf_counter()
    configure_django()
    migrate_s = time.perf_counter() - started
    from django.conf import settings

    result = measure(turns=args.turns, warmup=args.warmup, workspace=Path(settings.VAR_DIR) / "workspace")
    result.migrate_s = migrate_s
    print(report(result), flush=True)
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(asdict(result)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
