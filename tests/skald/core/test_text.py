"""One line of text for a narrow place: a table cell, a timeline line, an audit summary."""

from __future__ import annotations

from skald.core.text import clip_to_line


def test_it_keeps_short_text_and_folds_whitespace_into_one_line() -> None:
    assert clip_to_line("read  the\nlogs\t now", 80) == "read the logs now"


def test_a_cut_ends_in_an_ellipsis_within_the_limit() -> None:
    clipped = clip_to_line("x" * 100, 10)
    assert clipped == "x" * 9 + "…" and len(clipped) == 10
    assert clip_to_line("x" * 10, 10) == "x" * 10


def test_it_shows_any_value_as_text() -> None:
    assert clip_to_line({"decision": "approve"}, 80) == "{'decision': 'approve'}"
