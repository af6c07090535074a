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
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for number in range(1, args.turns + 1):
        run_turn(env, provider, number)
    profiler.disable()
    wall = time.perf_counter() - started

    print(f"{args.turns} one-tool turns on SQLite ({var_dir}): {wall:.2f} s under the profiler, "
          f"{wall / args.turns * 1000:.2f} ms per turn (profiling inflates this)\n")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
