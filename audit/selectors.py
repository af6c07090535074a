"""Reads of the audit log: rows in chain order, recorded heads, the current tip."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from audit.chain import GENESIS, RowLike
from audit.models import AuditEvent, ChainHead

# Big enough to keep round trips rare, small enough that a million-row chain never sits in memory.
VERIFY_CHUNK_ROWS = 2000

_ROW_FIELDS = (
    "seq", "time", "actor_type", "actor_id", "kind", "subject_type", "subject_id", "payload",
    "prev_hash", "hash",
)  # fmt: skip


def audit_rows_in_chain_order(*, after: int = 0, chunk_size: int = VERIFY_CHUNK_ROWS) -> Iterator[RowLike]:
    """Every row above seq ``after`` by ascending seq as light named tuples, fetched ``chunk_size``
    rows at a time."""
    rows = AuditEvent.objects.filter(seq__gt=after).order_by("seq").values_list(*_ROW_FIELDS, named=True)
    return rows.iterator(chunk_size=chunk_size)  # type: ignore[return-value]


def chain_heads() -> list[ChainHead]:
    """Every recorded head, lowest seq first (there is one per recording, so few)."""
    return list(ChainHead.objects.order_by("seq", "pk"))


def chain_head_latest() -> ChainHead | None:
    return ChainHead.objects.order_by("-seq", "-pk").first()


def chain_tip() -> tuple[int, str]:
    """``(seq, hash)`` of the last row, ``(0, GENESIS)`` for an empty chain."""
    tip = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
    return tip if tip is not None else (0, GENESIS)


def audit_hashes_at(seqs: Iterable[int]) -> dict[int, str]:
    """``{seq: hash}`` of the stored rows at ``seqs`` (a seq with no row is absent)."""
    return dict(AuditEvent.objects.filter(seq__in=list(seqs)).values_list("seq", "hash"))
