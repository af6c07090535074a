"""Hostile input: the detector's work stays linear in the text, counted (never timed).

The counters are the ones :class:`~loop.tripwires.ScanStats` keeps: characters handed to searched
rules and anchored attempts. With every pattern free of nested variable repeats (checked in
test_rules.py), each unit costs a bounded number of regex steps. ``make bench`` times these inputs.
"""

from __future__ import annotations

import pytest

from loop.tripwires import ScanStats, default_detector
from tests.loop.tripwire_corpus import SIZE, pathological_inputs


@pytest.mark.parametrize(("name", "text"), list(pathological_inputs().items()), ids=list(pathological_inputs()))
def test_work_stays_linear_on_pathological_input(name: str, text: str) -> None:
    detector = default_detector()
    rules_per_keyword = max(len(ids) for ids in detector._prefilter.rules_for.values())
    stats = ScanStats()

    detector.kinds(text, stats)

    assert stats.chars == len(text) == SIZE
    # A searched rule reads each character at most once however many keywords hit.
    assert stats.window_chars <= stats.rules_run * len(text)
    # An anchored rule tries once per occurrence of one of its keywords.
    assert stats.anchored <= stats.keyword_hits * rules_per_keyword
    # And keyword occurrences cannot outnumber the characters they start at.
    assert stats.keyword_hits <= len(text)
