"""The sequence manifest a compaction row carries, and its recomputation from stored rows.

The covered rows are one contiguous run of the narrative's conversation rows, ``first_seq`` to
``last_seq`` (the previous compaction row and its tail included, when there was one); ``count`` and
``digest`` (:func:`loop.digest.events_digest` over ``(seq, kind, payload)`` in seq order) pin them.
``tail_first_seq`` is where the verbatim tail the window keeps begins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loop.compaction.policy import Plan
from loop.digest import events_digest
from loop.projection import EventRow


def covered_fields(rows: Sequence[EventRow]) -> dict[str, Any]:
    """``first_seq``, ``last_seq``, ``count`` and ``digest`` of ``rows`` (any order)."""
    ordered = sorted(rows, key=lambda row: row.seq)
    return {
        "first_seq": ordered[0].seq,
        "last_seq": ordered[-1].seq,
        "count": len(ordered),
        "digest": events_digest([(row.seq, row.kind, row.payload) for row in ordered]),
    }


def build_manifest(plan: Plan, *, summary_tokens: int, cleared: int, episode_index: int) -> dict[str, Any]:
    """The manifest of the compaction ``plan`` describes."""
    return {
        **covered_fields([item.row for item in plan.covered]),
        "tail_first_seq": plan.tail[0].row.seq,
        "previous_seq": plan.previous_seq,
        "reason": plan.reason,
        "covered_tokens": plan.covered_tokens,
        "tail_tokens": plan.tail_tokens,
        "summary_tokens": summary_tokens,
        "cleared_tool_results": cleared,
        "episode_index": episode_index,
    }
