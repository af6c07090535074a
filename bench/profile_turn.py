"""Where a bench turn's time goes: cProfile over 200 one-tool turns on a fresh SQLite database.

``python -m bench.profile_turn [--turns N] [--top N] [--sort cumulative|tottime]`` prints the top
entries; divide a row's time by the number of turns for its cost per turn. The database is a
throwaway SQLite file in a temporary directory (``DATABASE_URL`` is ignored).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.kernel import WARMUP_TURNS, bench_provider, build_env, configure_django, create_session, run_turn

# The kernel's seams and the costs under them: label → (path suffix, function) pairs, summed.
# Indented rows are inside the row above, so the rows do not add up to the turn.
SEAMS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("admit_exchange (admission, user row, audit)", (("loop/driver.py", "admit_exchange"),)),
    ("Store.claim", (("loop/store.py", "claim"),)),
    ("Model.refresh_from_db", (("django/db/models/base.py", "refresh_from_db"),)),
    ("Store.cancel_requested", (("loop/store.py", "cancel_requested"),)),
    ("_CancelWatcher start + stop (a thread per exchange)", (("loop/driver.py", "__enter__"),
                                                             ("loop/driver.py", "__exit__"))),
    ("ContextBuilder.messages (replay + projection)", (("loop/context.py", "messages"),)),
    ("  Store.replay (the bounded SELECT)", (("loop/store.py", "replay"),)),
    ("  project", (("loop/projection.py", "project"),)),
    ("  window_start", (("loop/projection.py", "window_start"),)),
    ("dispatch (provider time included)", (("loop/dispatch.py", "dispatch"),)),
    ("  request_bytes", (("loop/dispatch.py", "request_bytes"),)),
    ("  provider (TimedProvider.stream + _timed)", (("bench/kernel.py", "stream"), ("bench/kernel.py", "_timed"))),
    ("  on_text live delta (bus)", (("loop/driver.py", "send"),)),
    ("Store.record_message_end", (("loop/store.py", "record_message_end"),)),
    ("run_round", (("loop/tools/fanout.py", "run_round"),)),
    ("  Store.record_intent", (("loop/store.py", "record_intent"),)),
    ("  execute_tool (a thread per call)", (("loop/tools/execute.py", "execute_tool"),)),
    ("  Store.record_result", (("loop/store.py", "record_result"),)),
    ("Store.settle (receipt)", (("loop/store.py", "settle"),)),
    ("Store._append (idempotency SELECT, seq, INSERT)", (("loop/store.py", "_append"),)),
    ("  Store._next_seq", (("loop/store.py", "_next_seq"),)),
    ("audit_append (chain tip, hash, INSERT)", (("audit/services.py", "audit_append"),)),
    ("  chain_tip", (("audit/selectors.py", "chain_tip"),)),
    ("on-commit wake (Store._wake's notify: SELECT + bus)", (("loop/store.py", "notify"),)),
    ("ChannelsBus._send (async_to_sync, all callers)", (("skald/loop_adapters/bus.py", "_send"),)),
    ("connection commit", (("django/db/backends/base/base.py", "_commit"),)),
    ("SQLite cursor.execute", (("django/db/backends/sqlite3/base.py", "execute"),)),
    ("Thread.start (all threads)", (("threading.py", "start"),)),
)


def seam_table(stats: pstats.Stats, turns: int) -> str:
    """Calls and cumulative milliseconds per turn for each seam in :data:`SEAMS`."""
    totals: dict[tuple[str, str], tuple[int, float]] = {}
    wanted = {pair for _label, pairs in SEAMS for pair in pairs}
    for (filename, _line, function), (_cc, calls, _tt, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for suffix, name in wanted:
            if function == name and filename.endswith(suffix):
                count, seconds = totals.get((suffix, name), (0, 0.0))
                totals[(suffix, name)] = (count + calls, seconds + cumulative)
    lines = [f"{'seam (cumulative, under the profiler)':54} {'calls/turn':>10} {'ms/turn':>8}"]
    for label, pairs in SEAMS:
        calls = sum(totals.get(pair, (0, 0.0))[0] for pair in pairs)
        seconds = sum(totals.get(pair, (0, 0.0))[1] for pair in pairs)
        lines.append(f"{label:54} {calls / turns:10.1f} {seconds * 1000 / turns:8.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_turn", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", choices=["cumulative", "tottime"], default="cumulative")
    args = parser.parse_args(argv)

    var_dir = Path(tempfile.mkdtemp(prefix="skald-profile-"))
    os.environ.pop("DATABASE_URL", None)
    # Production runs with DEBUG off; with it on, Django would also log every query.
    os.environ.update(SKALD_VAR_DIR=str(var_dir), SKALD_DEBUG="0", SKALD_LOG_LEVEL="WARNING")
    configure_django()
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="alice")
    provider = bench_provider()
    warm = build_env(create_session(user.pk, "warm-up"), provider, var_dir / "workspace")
    for number in range(1, WARMUP_TURNS + 1):
        run_turn(warm, provider, number)

    env = build_env(create_session(user.pk, "profiled"), provider, var_dir / "workspace")
    provider.seconds = 0.0
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for number in range(1, args.turns + 1):
        run_turn(env, provider, number)
    profiler.disable()
    wall = time.perf_counter() - started

    print(f"{args.turns} one-tool turns on SQLite ({var_dir}): {wall:.2f} s under the profiler, "
          f"{wall / args.turns * 1000:.2f} ms per turn (profiling inflates this; provider "
          f"{provider.seconds / args.turns * 1000:.2f} ms per turn)\n")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    print(seam_table(stats, args.turns), "\n", flush=True)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
