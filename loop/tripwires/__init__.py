"""Credential tripwires (SPEC L16): one detector guards every path from Skald to a provider.

The rule set is the gitleaks rule file, vendored as data (:mod:`loop.tripwires.rules`), plus
Skald's own rules (:mod:`loop.tripwires.builtin`), plus whatever an organisation adds: its
patterns and allow-list entries are handed in by the caller (:func:`organisation_detector`), the
kernel never reads them itself.

This is a ceiling, not a guarantee. Pattern matching finds credentials with a known shape or a
telling name; an unlabelled password, a key split across lines or encoded (base64, hex, URL
encoding) or a format no rule knows passes through.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from loop.tripwires.builtin import SOURCE_SKALD, skald_rules
from loop.tripwires.detector import AllowEntry, Detector, Finding, ScanStats
from loop.tripwires.gorex import backtracking_problems
from loop.tripwires.rules import GITLEAKS_VERSION, NOT_LOADED, Rule, gitleaks_rules

__all__ = [
    "GITLEAKS_VERSION",
    "NOT_LOADED",
    "SOURCE_ORGANISATION",
    "AllowEntry",
    "Detector",
    "Finding",
    "OrgPattern",
    "PatternProblem",
    "Rule",
    "ScanStats",
    "default_detector",
    "organisation_detector",
    "pattern_problems",
]

SOURCE_ORGANISATION = "organisation"
MAX_PATTERN_LENGTH = 500


@dataclass(frozen=True, slots=True)
class OrgPattern:
    """An organisation's own credential shape. ``name`` becomes the kind ``org:<name>``;
    ``keywords`` (lowercase literals) let the detector skip texts without them; none: every text."""

    name: str
    regex: str
    keywords: tuple[str, ...] = ()


class PatternProblem(ValueError):
    """An organisation pattern or allow-list entry that the detector refuses to run."""


@lru_cache(maxsize=1)
def default_detector() -> Detector:
    """The vendored gitleaks rules, Skald's rules and the vendored global allow-list."""
    vendored, global_allow = gitleaks_rules()
    return Detector(rules=vendored + skald_rules(), allowlists=(global_allow,),
                    fingerprint=f"gitleaks-{GITLEAKS_VERSION}+{SOURCE_SKALD}")


def pattern_problems(regex: str) -> list[str]:
    """Why ``regex`` cannot be an organisation pattern or allow entry; empty when it can."""
    if not regex.strip():
        return ["A pattern is required."]
    if len(regex) > MAX_PATTERN_LENGTH:
        return [f"A pattern is at most {MAX_PATTERN_LENGTH} characters."]
    try:
        compiled = re.compile(regex, re.ASCII)
    except re.error as exc:
        return [f"Not a valid regular expression: {exc}."]
    problems = [f"It could backtrack without bound: {p}." for p in backtracking_problems(compiled)]
    if compiled.match("") is not None:
        problems.append("It matches the empty text, so it would match everywhere.")
    return problems


def _compiled(regex: str) -> re.Pattern[str]:
    problems = pattern_problems(regex)
    if problems:
        raise PatternProblem(" ".join(problems))
    return re.compile(regex, re.ASCII)


def organisation_detector(patterns: Sequence[OrgPattern] = (), allow: Sequence[tuple[str, str]] = ()) -> Detector:
    """The default detector plus an organisation's ``patterns`` and ``allow`` (regex, reason) pairs.

    Raises:
        PatternProblem: A pattern or entry fails :func:`pattern_problems` (the product validates
            them when they are saved, so this means a row was written around that check).
    """
    if not patterns and not allow:
        return default_detector()
    return _organisation_detector(tuple(patterns), tuple(allow))


@lru_cache(maxsize=16)
def _organisation_detector(patterns: tuple[OrgPattern, ...], allow: tuple[tuple[str, str], ...]) -> Detector:
    rules = [
        Rule.build(id=f"org:{p.name}", pattern=_compiled(p.regex), keywords=p.keywords, source=SOURCE_ORGANISATION)
        for p in patterns
    ]
    entries = [AllowEntry(_compiled(regex), reason) for regex, reason in allow]
    digest = hashlib.sha256(repr((patterns, allow)).encode()).hexdigest()[:16]
    return default_detector().extended(rules=rules, allow=entries, fingerprint=f"org-{digest}")
