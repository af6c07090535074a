"""Where a bench turn's time goes, on a fresh SQLite database, or with ``--postgres URL`` on that
PostgreSQL database, dropped and created first (``DATABASE_URL`` is ignored either way).

Two passes over ``--turns`` one-tool turns (200 by default) on one session each:

1. seam timers: wall-clock timers wrapped around the kernel's seams for the run only, without a
   profiler, so the milliseconds per turn are close to the real ones: inclusive times nest,
   exclusive times (minus the seams nested inside) add up to the turn;
2. cProfile: the top ``--top`` entries by ``--sort`` (cumulative by default). Profiling inflates
   Python-heavy code more than waiting, so read it for shape, and the timers for size.

``python -m bench.profile_turn [--turns N] [--top N] [--sort cumulative|tottime] [--postgres URL]``
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.kernel import (
    TimedProvider,
    bench_provider,
    build_env,
    configure_django,
    create_session,
    run_turn,
)
from bench.turn_shape import WARMUP_TURNS

# label → "module:Attribute.path" of the callable to time. Indented rows run inside the row above;
# the exclusive times ("excl") add up to the turn.
SEAMS: tuple[tuple[str, str], ...] = (
    ("admit_exchange (admission tx: user row + audit)", "loop.driver:admit_exchange"),
    ("store.exchanges.claim (claim tx)", "loop.store_exchanges:ExchangeLog.claim"),
    ("Model.refresh_from_db", "django.db.models.base:Model.refresh_from_db"),
    ("store.exchanges.cancel_requested", "loop.store_exchanges:ExchangeLog.cancel_requested"),
    ("store.exchanges.root_frame", "loop.store_exchanges:ExchangeLog.root_frame"),
    ("StopWatcher register (one watcher thread per process)", "loop.watch:StopWatcher.__enter__"),
    ("StopWatcher unregister (no join)", "loop.watch:StopWatcher.__exit__"),
    ("ContextBuilder.window (replay + window + projection)", "loop.context:ContextBuilder.window"),
    ("  Store.replay (the bounded SELECT)", "loop.store:Store.replay"),
    ("dispatch (provider time included)", "loop.driver:dispatch"),
    ("  request_bytes", "loop.dispatch:request_bytes"),
    ("  provider stream (excluded from the bench)", "bench.kernel:TimedProvider.stream"),
    ("  on_text live delta (bus)", "loop.driver:FrameDrive._live_text"),
    ("store.exchanges.record_message_end (turn tx)", "loop.store_exchanges:ExchangeLog.record_message_end"),
    ("store.calls.record_intent (intent tx)", "loop.store_calls:CallLog.record_intent"),
    ("execute_tool (a pooled thread per call)", "loop.tools.fanout:execute_tool"),
    ("store.calls.record_result (result tx)", "loop.store_calls:CallLog.record_result"),
    ("store.exchanges.finish_turn (message end + receipt tx)", "loop.store_exchanges:ExchangeLog.finish_turn"),
    ("Journal.append (seq + INSERT, one statement on PostgreSQL)", "loop.journal:Journal.append"),
    ("audit_append (chain tip + hash + INSERT)", "skald.loop_adapters.audit_sink:audit_append"),
    ("on-commit hooks (wake: SELECT last_seq + bus)",
     "django.db.backends.base.base:BaseDatabaseWrapper.run_and_clear_commit_hooks"),
    ("ChannelsBus._send (async_to_sync; wakes + deltas)", "skald.loop_adapters.bus:ChannelsBus._send"),
    ("COMMIT", "django.db.backends.base.base:BaseDatabaseWrapper._commit"),
    ("SQL execution, the store's statements (DriverCursor.execute)", "loop.sql:DriverCursor.execute"),
    ("SQL execution, Django's cursor (ORM; CursorWrapper._execute)", "django.db.backends.utils:CursorWrapper._execute"),
)


def _resolve(target: str) -> tuple[Any, str]:
    module_name, _, path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, attribute = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, attribute


@dataclass
class SeamTotals:
    calls: int = 0
    inclusive: float = 0.0
    exclusive: float = 0.0  # minus the time of the seams nested inside


@contextmanager
def seam_timers() -> Iterator[dict[str, SeamTotals]]:
    """Wrap every seam in :data:`SEAMS` with a timer for the ``with`` block."""
    totals = {label: SeamTotals() for label, _target in SEAMS}
    stacks = threading.local()  # per thread: the nested seams' time, one slot per open seam
    restore: list[tuple[Any, str, Any]] = []

    def timer(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = stacks.__dict__.setdefault("open", [])
            stack.append(0.0)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                nested = stack.pop()
                if stack:
                    stack[-1] += elapsed
                entry = totals[label]
                entry.calls += 1
                entry.inclusive += elapsed
                entry.exclusive += elapsed - nested

        return timed

    def sender_timer(label: str, factory: Callable[..., Any]) -> Callable[..., Any]:
        # _live_text makes the per-turn sender: time the sends, not the factory.
        @functools.wraps(factory)
        def make(*args: Any, **kwargs: Any) -> Callable[..., Any]:
            return timer(label, factory(*args, **kwargs))

        return make

    for label, target in SEAMS:
        owner, attribute = _resolve(target)
        original = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
        restore.append((owner, attribute, original))
        setattr(owner, attribute, (sender_timer if attribute == "_live_text" else timer)(label, original))
    try:
        yield totals
    finally:
        for owner, attribute, original in reversed(restore):
            setattr(owner, attribute, original)


def _turns(env: Any, provider: TimedProvider, first: int, count: int) -> tuple[float, float]:
    """``count`` bench turns; returns (wall seconds, provider seconds)."""
    wall = in_provider = 0.0
    for number in range(first, first + count):
        turn_wall, turn_provider = run_turn(env, provider, number)
        wall += turn_wall
        in_provider += turn_provider
    return wall, in_provider


LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the kernel (loop/)", ("/loop/",)),
    ("the product's adapters (skald/)", ("/skald/",)),
    ("the audit chain (audit/)", ("/audit/",)),
    ("Django", ("/django/",)),
    ("psycopg", ("/psycopg",)),
    ("asgiref and channels", ("/asgiref/", "/channels")),
    ("pydantic", ("/pydantic",)),
    ("json", ("/json/",)),
    ("the benchmark harness (bench/)", ("/bench/",)),
)


def layer_of(filename: str) -> str:
    """The layer a profiled function belongs to, by its file's path."""
    for label, markers in LAYERS:
        if any(marker in filename for marker in markers):
            return label
    if filename == "~":
        return "builtins (C functions)"
    return "the standard library and the rest"


def print_layers(stats: pstats.Stats, wall: float) -> None:
    """Self time summed by layer: which code's own lines take the turn's time (waiting on a socket
    counts where the wait is made: psycopg's ``wait``, inside the builtins' ``select``)."""
    totals: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        label = layer_of(filename)
        totals[label] = totals.get(label, 0.0) + tottime
    print(f"{'self time by layer':58} {'share':>10}")
    for label, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"{label:58} {seconds / wall:10.1%}")
    print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_turn", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", choices=["cumulative", "tottime"], default="cumulative")
    parser.add_argument("--postgres", metavar="URL", default="",
                        help="profile on this PostgreSQL database (dropped and created first) instead of SQLite")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="skald-profile-") as tmp:
        profile(args, Path(tmp))
    return 0


def profile(args: argparse.Namespace, var_dir: Path) -> None:
    os.environ.pop("DATABASE_URL", None)
    where = "a fresh SQLite file"
    if args.postgres:
        from bench.__main__ import recreate_postgres_database

        problem = recreate_postgres_database(args.postgres)
        if problem:
            raise SystemExit(f"PostgreSQL at {args.postgres}: {problem}")
        os.environ["DATABASE_URL"] = args.postgres
        where = f"PostgreSQL ({args.postgres}, recreated)"
    # DEBUG off as in production: with it on, Django would also record every query it runs.
    os.environ.update(SKALD_VAR_DIR=str(var_dir), SKALD_DEBUG="0", SKALD_LOG_LEVEL="WARNING")
    configure_django()
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="alice")
    provider = bench_provider()
    warm = build_env(create_session(user.pk, "warm-up"), provider, var_dir / "workspace")
    _turns(warm, provider, 1, WARMUP_TURNS)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.turns} one-tool turns per pass on {where}; load average {load:.2f}\n")

    timed_session = create_session(user.pk, "timed")
    with seam_timers() as totals:
        # The store binds its collaborators' methods when it is built: build it under the timers.
        from skald.loop_adapters.store import kernel_store

        kernel_store.cache_clear()
        timed_env = build_env(timed_session, provider, var_dir / "workspace")
        wall, in_provider = _turns(timed_env, provider, 1, args.turns)
    kernel_store.cache_clear()

    def ms(seconds: float) -> float:
        return seconds * 1000 / args.turns

    print(f"Pass 1, seam timers: {ms(wall):.2f} ms per turn, of which provider {ms(in_provider):.2f} ms; "
          f"overhead {ms(wall - in_provider):.2f} ms")
    print(f"{'seam':58} {'calls/turn':>10} {'incl ms':>8} {'excl ms':>8}")
    for label, entry in totals.items():
        print(f"{label:58} {entry.calls / args.turns:10.1f} {ms(entry.inclusive):8.3f} {ms(entry.exclusive):8.3f}")
    rest = wall - sum(entry.exclusive for entry in totals.values())
    print(f"{'(driver and ORM glue outside every seam)':58} {'':10} {'':8} {ms(rest):8.3f}")

    env = build_env(create_session(user.pk, "profiled"), provider, var_dir / "workspace")
    profiler = cProfile.Profile()
    profiler.enable()
    wall, _in_provider = _turns(env, provider, 1, args.turns)
    profiler.disable()
    print(f"\nPass 2, cProfile: {ms(wall):.2f} ms per turn under the profiler "
          f"(divide the times below by {args.turns} for per turn)")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    print_layers(stats, wall)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)

    from django.db import connections

    connections.close_all()


if __name__ == "__main__":
    sys.exit(main())
