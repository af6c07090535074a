"""What the kernel bench and its peer share, so their figures compare: how many turns, how many
warm-up turns, how the two ends of a run are averaged, and the peer's figures as ``make bench``
reads them. Standard library only: :mod:`bench.peer` imports it in a virtualenv without Django."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

TURNS = 400
WARMUP_TURNS = 20
EDGE = 20  # turns averaged at each end for the growth ratio


def ends(ms: Sequence[float]) -> tuple[int, float, float]:
    """``(edge, mean of the first edge turns, mean of the last edge turns)`` of a run."""
    edge = min(EDGE, max(1, len(ms) // 2))
    return edge, statistics.fmean(ms[:edge]), statistics.fmean(ms[-edge:])


@dataclass(frozen=True)
class PeerResult:
    """One run of :mod:`bench.peer`, as it writes it to its result file."""

    peer: str
    checkpointer: str
    durability: str
    turns: int
    median_ms: float
    first_mean_ms: float
    last_mean_ms: float
    growth: float
    cpu_median_ms: float
    model_median_ms: float
    versions: dict[str, str]


def peer_main(argv: Sequence[str] | None, *, prog: str, description: str,
              measure: Callable[..., PeerResult], describe: Callable[[PeerResult], str]) -> int:
    """A peer's command line (:mod:`bench.peer`, :mod:`bench.peer_dbos`): ``--database sqlite|URL``,
    ``--turns``, ``--warmup``, ``--result-file``; prints ``describe(result)`` and the figures' line."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--database", required=True, help="sqlite, or the URL of an empty PostgreSQL database")
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--warmup", type=int, default=WARMUP_TURNS)
    parser.add_argument("--result-file", type=Path)
    args = parser.parse_args(argv)
    result = measure(args.database, turns=args.turns, warmup=args.warmup)
    print(f"{describe(result)}: median {result.median_ms:.2f} ms per one-tool turn (model time subtracted), "
          f"turns 1-{EDGE} {result.first_mean_ms:.2f} ms, last {EDGE} {result.last_mean_ms:.2f} ms "
          f"(growth {result.growth:.2f}x), CPU {result.cpu_median_ms:.2f} ms", flush=True)
    if args.result_file:
        args.result_file.write_text(json.dumps(asdict(result), indent=2), encoding="utf-8")
    return 0
