"""What a provider will read, beside the raw text: the views of a text the detector screens.

A credential can reach the model in a shape the raw text hides from a pattern:

- **JSON escapes.** Tool-call arguments and JSON tool results are JSON text; ``"\\u0067hp_…"`` or
  ``"AKIA…\\/…"`` decode to the credential the model reads, while the raw text does not match.
  When the text carries JSON string escapes, it is screened with them decoded too.
- **Zero-width characters** (U+200B to U+200D, U+2060, U+FEFF, the soft hyphen U+00AD) inside a token
  split it for a regex, not for a reader. When the text carries any, it is screened with them
  removed as well.

Still out of reach (docs/production.md says so too): base64, hex, URL or HTML-entity encodings;
a credential split across several strings, rows or calls; look-alike letters (homoglyphs);
anything a model is asked to reassemble itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")


def revealed_views(text: str) -> Iterator[str]:
    """The other views of ``text`` worth screening (none for plain text: the common case costs two
    character checks)."""
    hidden = not text.isascii() and _ZERO_WIDTH.search(text) is not None
    if hidden:
        yield _ZERO_WIDTH.sub("", text)
    if "\\" in text:
        decoded = _unescaped(text)
        if decoded is not None:
            yield decoded
            if not decoded.isascii() and _ZERO_WIDTH.search(decoded) is not None:
                yield _ZERO_WIDTH.sub("", decoded)


_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescaped(text: str) -> str | None:
    """``text`` with its JSON string escapes decoded in place (``\\u0067`` → ``g``, ``\\/`` → ``/``), or
    ``None`` when it has none. Decoding in place rather than parsing: no depth limit, and JSON
    fragments inside other text (a log line, a half-written document) are read too."""
    if _ESCAPE.search(text) is None:
        return None
    return _ESCAPE.sub(_decode_one, text)


def _decode_one(match: re.Match[str]) -> str:
    escape = match.group(1)
    return chr(int(escape[1:], 16)) if len(escape) == 5 else _SIMPLE[escape]
