"""Canonical JSON and digests for the kernel's receipts and argument hashes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def arguments_hash(arguments: Mapping[str, Any] | str) -> str:
    """A hash of the exact arguments: canonical JSON for parsed ones, the raw text otherwise."""
    return sha256_hex(arguments if isinstance(arguments, str) else canonical(arguments))


def events_digest(events: Iterable[tuple[int, str, Mapping[str, Any]]]) -> str:
    """A running SHA-256 over ``(seq, kind, payload)`` of an exchange's events, in order."""
    digest = hashlib.sha256()
    for seq, kind, payload in events:
        digest.update(f"{seq}\x1f{kind}\x1f{canonical(payload)}\x1e".encode())
    return digest.hexdigest()
