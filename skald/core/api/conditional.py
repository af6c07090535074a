"""Conditional writes (RFC 9110 §13): an ETag on every representation, ``If-Match`` on every change.

A row's ETag is a strong validator: the SHA-256 of its audited view as canonical JSON, so it changes
exactly when something an audit row would record changes (not, say, a rule's hit count). A write
names the version it read in ``If-Match``; without one it is ``428 precondition_required``, with
another ``412 precondition_failed``. The comparison belongs inside the write's transaction, after
the row is locked (:func:`precondition_check`), so two writers holding one ETag make one winner.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from skald.core.errors import SkaldError

IF_MATCH_DESCRIPTION = (
    "The ETag of the version you read (from the GET, POST or PATCH that answered it). The write happens "
    "only if the row is still that version: otherwise 412 `precondition_failed`, and nothing is changed. "
    "Without it: 428 `precondition_required`. `*` is not accepted: name the version you mean to change."
)


class PreconditionRequired(SkaldError):
    code = "precondition_required"
    http_status = 428


class PreconditionFailed(SkaldError):
    code = "precondition_failed"
    http_status = 412


def etag_of(view: Any) -> str:
    """The strong ETag (quoted) of a JSON-safe view: its canonical JSON's SHA-256."""
    text = json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return '"' + hashlib.sha256(text.encode("utf-8")).hexdigest() + '"'


def if_match_require(header: str | None) -> tuple[str, ...]:
    """The entity tags an ``If-Match`` header names; ``precondition_required`` (428) when there is none."""
    tags = tuple(tag.strip() for tag in (header or "").split(",") if tag.strip())
    if not tags:
        raise PreconditionRequired("This write needs an If-Match header naming the ETag of the version you read.")
    return tags


def precondition_check(tags: tuple[str, ...], current: str) -> None:
    """``precondition_failed`` (412) unless ``current`` is one of ``tags`` (strong comparison: a weak
    ``W/`` tag never matches)."""
    if current not in tags:
        raise PreconditionFailed("The row changed since you read it: read it again, then retry your change.",
                                 etag=current)
