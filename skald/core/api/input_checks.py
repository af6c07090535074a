"""Pure checks on untrusted input, shared by the request guard and views that parse JSON themselves.

Each check raises :class:`~skald.core.errors.SkaldError` with a stable code and a 4xx status, so
bad input is refused before any view, database or hash ever sees it:

- ``json_too_deep`` (400): nesting deeper than :data:`MAX_JSON_DEPTH` (Python's parser would raise
  ``RecursionError`` somewhere past 900 levels; nothing Skald accepts nests past a few);
- ``nul_character`` (400): a NUL in any string or key (PostgreSQL text cannot hold one, SQLite
  would store it silently);
- ``invalid_unicode`` (400): a lone surrogate (no UTF-8 encoding exists for it) or bytes that are
  not UTF-8;
- ``invalid_json`` (400): not JSON at all.
"""

from __future__ import annotations

import json
import re
from typing import Any

from skald.core.errors import SkaldError

MAX_JSON_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_check(value: str, *, where: str) -> None:
    """Refuse a NUL or a lone surrogate in ``value`` (``where`` names the place for the caller)."""
    if "\x00" in value:
        raise SkaldError(f"NUL characters are not accepted ({where}).", code="nul_character", where=where)
    if _SURROGATE.search(value):
        raise SkaldError(f"Lone surrogates are not valid Unicode ({where}).", code="invalid_unicode", where=where)


def json_check(value: Any, *, where: str = "body") -> None:
    """Walk a parsed JSON value without recursion: depth, NULs and surrogates in keys and strings."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            text_check(item, where=where)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise SkaldError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels ({where}).", code="json_too_deep",
                             where=where, max_depth=MAX_JSON_DEPTH)
        if isinstance(item, dict):
            for key, child in item.items():
                text_check(key, where=where)
                stack.append((child, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item)


def json_loads_checked(raw: str | bytes, *, where: str = "body") -> Any:
    """``json.loads`` that answers every malformed input with a 400 of a stable code."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SkaldError(f"The {where} is not UTF-8.", code="invalid_unicode", where=where) from None
    try:
        value = json.loads(raw)
    except RecursionError:
        raise SkaldError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels ({where}).", code="json_too_deep",
                         where=where, max_depth=MAX_JSON_DEPTH) from None
    except ValueError as exc:
        raise SkaldError(f"The {where} is not valid JSON: {exc}", code="invalid_json", where=where) from None
    json_check(value, where=where)
    return value
