"""Text shown in the admin's narrow places: table cells, timeline lines, summaries."""

from __future__ import annotations


def clip_to_line(text: object, limit: int) -> str:
    """``text`` as one line of at most ``limit`` characters: runs of whitespace (newlines included)
    become one space, and a cut ends in "…" so the reader sees that something was left out."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
