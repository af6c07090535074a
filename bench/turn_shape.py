"""What the kernel bench and its peer share, so their figures compare: how many turns, how many
warm-up turns, how the two ends of a run are averaged, and the peer's figures as ``make bench``
reads them. Standard library only: :mod:`bench.peer` imports it in a virtualenv without Django."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

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
