"""The hash chain, pure: canonical bytes, row hashes, head signatures and verification.

No ORM and no settings here: :mod:`audit.services` feeds rows and recorded heads in, so the same
code verifies a live database, an export, or a list built by a test.

Each row's ``hash`` is SHA-256 over the canonical JSON of a versioned array of every field plus
``prev_hash``; the first row links to :data:`GENESIS`. Editing any field, deleting, inserting or
reordering rows breaks a recomputed hash, the ``prev_hash`` link or the contiguous ``seq``. A
tail cut off cleanly leaves a shorter chain that is still well-formed; only a head recorded
earlier (seq + hash, HMAC-signed when a key is configured) reveals it. What a hash chain cannot
reveal on its own: an attacker who rewrites every row after the last recorded head, or appends
forged rows after it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

GENESIS = "0" * 64
# Part of every hashed array: a future change of the hashed layout gets a new tag, never a silent
# reinterpretation of old rows.
HASH_VERSION = "skald.audit.v1"


class RowLike(Protocol):
    """What verification reads of a row: a model instance, a named tuple, a test double."""

    @property
    def seq(self) -> int: ...
    @property
    def time(self) -> datetime: ...
    @property
    def actor_type(self) -> str: ...
    @property
    def actor_id(self) -> str: ...
    @property
    def kind(self) -> int: ...
    @property
    def subject_type(self) -> str: ...
    @property
    def subject_id(self) -> str: ...
    @property
    def payload(self) -> str: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


class HeadLike(Protocol):
    """A recorded head: a :class:`~audit.models.ChainHead` or an :class:`ExportedHead`."""

    @property
    def seq(self) -> int: ...
    @property
    def hash(self) -> str: ...
    @property
    def recorded_at(self) -> datetime | str: ...  # a datetime from the database, text from an export
    @property
    def signature(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ExportedHead:
    """A head as exported (see ``chain_head_export``), kept outside the database by an operator."""

    seq: int
    hash: str
    recorded_at: str
    signature: str | None = None

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ExportedHead:
        """Read an exported head; ``ValueError`` names the first malformed field."""
        seq, digest = data.get("seq"), data.get("hash")
        recorded_at, signature = data.get("recorded_at"), data.get("signature")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise ValueError("exported head: seq must be a positive integer")
        if not isinstance(digest, str) or len(digest) != 64:
            raise ValueError("exported head: hash must be 64 hex characters")
        if not isinstance(recorded_at, str):
            raise ValueError("exported head: recorded_at must be an ISO-8601 string")
        if signature is not None and not isinstance(signature, str):
            raise ValueError("exported head: signature must be a string or null")
        return cls(seq=seq, hash=digest, recorded_at=recorded_at, signature=signature or None)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of a verification.

    Attributes:
        ok: the chain is intact and reaches every recorded head.
        rows: how many rows were examined (up to and including the first bad one).
        first_bad_seq: the lowest seq found wrong (a missing seq names itself), else ``None``.
        reason: why ``first_bad_seq`` is wrong, in words, else ``None``.
        tip_seq: seq of the last row that verified (0 for an empty or immediately broken chain).
        tip_hash: hash of that row (``GENESIS`` when ``tip_seq`` is 0).
    """

    ok: bool
    rows: int
    first_bad_seq: int | None = None
    reason: str | None = None
    tip_seq: int = 0
    tip_hash: str = GENESIS


# --- canonical bytes ----------------------------------------------------------------------------


def _check_json(value: Any, path: str) -> None:
    # json.dumps alone is too forgiving: it turns int keys into strings (so {1: …} and {"1": …}
    # would hash alike), tuples into arrays only on the way out, and NaN into invalid JSON.
    if value is None or isinstance(value, bool | str | int):
        if isinstance(value, str):
            _check_text(value, path)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} is not representable in JSON")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: object key {key!r} is {type(key).__name__}, not str")
            _check_text(key, path)
            _check_json(item, f"{path}.{key}")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{path}[{index}]")
        return
    raise TypeError(f"{path}: {type(value).__name__} is not a JSON type")


def _check_text(text: str, path: str) -> None:
    # A lone surrogate has no UTF-8 bytes: it could neither be hashed nor stored by PostgreSQL.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{path}: string is not valid Unicode ({exc.reason})") from None


def canonical_json(value: Any) -> str:
    """The one canonical JSON text of ``value``: sorted keys, no spaces, UTF-8 kept as is.

    Raises:
        TypeError: a value or object key that is not JSON (datetime, Decimal, set, int key …).
        ValueError: NaN or ±Infinity, or a string that is not valid Unicode.
    """
    # Fast path (every audited write): one walk of the types, one dumps, one encode. Any doubt
    # reruns the walk that names the offending path, which raises.
    if _plain(value):
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            text.encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError):
            pass
        else:
            return text
    _check_json(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _plain(value: Any) -> bool:
    """Only JSON types and string keys (what ``json.dumps`` would otherwise coerce silently)."""
    if value is None or isinstance(value, bool | str | int | float):
        return True
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(item) for item in value)
    return False


def format_time(moment: datetime) -> str:
    """ISO-8601 in UTC with exactly six fractional digits: ``2026-01-02T03:04:05.000006Z``."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("audit times must be timezone-aware")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


# --- hashes and signatures ----------------------------------------------------------------------


def row_hash(
    *,
    seq: int,
    time: datetime,
    actor_type: str,
    actor_id: str,
    kind: int,
    subject_type: str,
    subject_id: str,
    payload: str,
    prev_hash: str,
) -> str:
    """SHA-256 (hex) over the canonical bytes of every field of a row and its ``prev_hash``.

    ``payload`` is the stored canonical JSON *text*, hashed as a string, so the hash covers exactly
    the bytes in the database. An array (not a concatenation) keeps field boundaries unambiguous.
    """
    fields = [
        HASH_VERSION,
        int(seq),
        format_time(time),
        actor_type,
        actor_id,
        int(kind),
        subject_type,
        subject_id,
        payload,
        prev_hash,
    ]
    return hashlib.sha256(canonical_json(fields).encode("utf-8")).hexdigest()


def head_signature(key: str | bytes, *, seq: int, hash: str, recorded_at: datetime | str) -> str:
    """HMAC-SHA256 (hex) of a head's canonical ``{seq, hash, recorded_at}``."""
    when = recorded_at if isinstance(recorded_at, str) else format_time(recorded_at)
    message = canonical_json({"seq": int(seq), "hash": hash, "recorded_at": when}).encode("utf-8")
    secret = key.encode("utf-8") if isinstance(key, str) else key
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def head_signature_valid(key: str | bytes, head: HeadLike) -> bool:
    expected = head_signature(key, seq=head.seq, hash=head.hash, recorded_at=head.recorded_at)
    return hmac.compare_digest(expected, head.signature or "")


# --- verification -------------------------------------------------------------------------------


def _bad_head(heads: Sequence[HeadLike], key: str | bytes | None) -> tuple[int, str] | None:
    # A forged head could excuse a truncation or a rewritten tail, so heads are checked first.
    for head in sorted(heads, key=lambda h: h.seq):
        if head.seq < 1:
            return max(head.seq, 0), f"recorded head has an impossible seq {head.seq}"
        if not key:
            continue
        where = "exported head" if isinstance(head, ExportedHead) else "recorded head"
        # With a key, a head without a signature is as suspect as a forged one: blanking the
        # signatures is how someone who rewrote the chain would excuse their new heads. Heads recorded
        # before the key existed are signed once by ``manage.py sign_chain_heads``.
        if not head.signature:
            return head.seq, f"{where} #{head.seq} is unsigned while SKALD_AUDIT_KEY is set"
        if not head_signature_valid(key, head):
            return head.seq, f"{where} #{head.seq} has an invalid signature"
    return None


def verify_rows(
    rows: Iterable[RowLike],
    heads: Sequence[HeadLike],
    *,
    key: str | bytes | None = None,
    start: tuple[int, str] = (0, GENESIS),
) -> VerifyReport:
    """Verify rows given in ascending ``seq`` order against the recorded heads.

    Checks, in one streaming pass (``rows`` may be a chunked database iterator): ``seq`` counts
    1, 2, 3 … without gap or repeat; each ``prev_hash`` is the previous row's hash; each stored
    hash equals the recomputed one; every recorded head is still present with its hash; the
    chain is not shorter than the last recorded head. With ``key``, every head must carry a valid
    HMAC: an unsigned head fails, naming the head. Stops at the first problem, which is the lowest bad seq.

    ``start`` resumes after a tip an earlier pass verified, ``(seq, hash)``: ``rows`` then begin
    at ``seq + 1`` and must link to ``hash``. Heads at or below that seq are the caller's to
    compare with the stored rows (this pass does not see those rows).
    """
    bad = _bad_head(heads, key)
    if bad is not None:
        return VerifyReport(ok=False, rows=0, first_bad_seq=bad[0], reason=bad[1])
    expected_hash_at: dict[int, set[str]] = {}
    for head in heads:
        expected_hash_at.setdefault(head.seq, set()).add(head.hash)
    count, (tip_seq, tip_hash) = 0, start

    def broken(seq: int, reason: str) -> VerifyReport:
        return VerifyReport(False, count, seq, reason, tip_seq, tip_hash)

    for row in rows:
        count += 1
        expected_seq = tip_seq + 1
        if row.seq != expected_seq:
            if row.seq > expected_seq:
                return broken(expected_seq, f"seq {expected_seq} is missing (next row is seq {row.seq})")
            return broken(expected_seq, f"seq {row.seq} appears where seq {expected_seq} belongs")
        if row.prev_hash != tip_hash:
            return broken(row.seq, f"prev_hash does not link to seq {tip_seq}'s hash")
        recomputed = row_hash(
            seq=row.seq,
            time=row.time,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            kind=row.kind,
            subject_type=row.subject_type,
            subject_id=row.subject_id,
            payload=row.payload,
            prev_hash=row.prev_hash,
        )
        if not hmac.compare_digest(recomputed, row.hash):
            return broken(row.seq, "hash does not match the row's content")
        recorded = expected_hash_at.get(row.seq)
        if recorded is not None and recorded != {row.hash}:
            return broken(row.seq, f"row differs from the head recorded at seq {row.seq}")
        tip_seq, tip_hash = row.seq, row.hash

    last_head = max((head.seq for head in heads), default=0)
    if last_head > tip_seq:
        return broken(
            tip_seq + 1, f"chain ends at seq {tip_seq}, behind the head recorded at seq {last_head}"
        )
    return VerifyReport(True, count, None, None, tip_seq, tip_hash)
