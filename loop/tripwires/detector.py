"""The credential detector: keyword prefilter, then each rule on small windows around its hits.

Cost model. One pass of a keyword trie over the ASCII-lowercased text finds every keyword
occurrence. A rule runs only on windows of ``±rule.reach`` around its own keywords' occurrences,
overlapping windows merged, so a rule reads each character at most once; no rule is ever searched
across a whole text just because its keyword occurs somewhere. :class:`ScanStats` counts both
(the suite bounds them on pathological input; ``make bench`` turns them into time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loop.tripwires.gorex import trie_pattern
from loop.tripwires.rules import Allowlist, Rule, shannon_entropy

__all__ = ["AllowEntry", "Detector", "Finding", "ScanStats"]

LINE_CONTEXT = 512
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True, slots=True)
class Finding:
    """Where a credential is; the value itself is ``text[start:end]`` and is never carried here."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """An operator's exception: a finding whose matched text contains a match of ``pattern`` is
    not a finding. ``reason`` is kept for the record, not used here."""

    pattern: re.Pattern[str]
    reason: str = ""


@dataclass
class ScanStats:
    """Work done by one or more scans, in units that do not depend on the machine."""

    texts: int = 0
    chars: int = 0
    keyword_hits: int = 0
    windows: int = 0
    window_chars: int = 0  # characters handed to searched rule patterns, summed over rules
    anchored: int = 0  # anchored attempts (``re.match`` at a keyword, at most ``reach`` characters)
    rules_run: int = 0  # rules that had a keyword hit in a text, summed over texts

    def add(self, other: ScanStats) -> None:
        for name in ("texts", "chars", "keyword_hits", "windows", "window_chars", "anchored", "rules_run"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class _Prefilter:
    pattern: re.Pattern[str] | None
    rules_for: dict[str, tuple[int, ...]]  # matched keyword → every rule whose keyword is a prefix of it
    everywhere: tuple[int, ...]  # rules with no keyword


def _prefilter(rules: Sequence[Rule]) -> _Prefilter:
    by_keyword: dict[str, list[int]] = {}
    everywhere = []
    for index, rule in enumerate(rules):
        if not rule.keywords:
            everywhere.append(index)
        for keyword in rule.keywords:
            by_keyword.setdefault(keyword, []).append(index)
    # The trie matches the longest keyword at a position; a shorter keyword that is its prefix
    # occurs there too, so its rules come along.
    rules_for = {
        word: tuple(sorted({i for other, ids in by_keyword.items() if word.startswith(other) for i in ids}))
        for word in by_keyword
    }
    pattern = re.compile(trie_pattern(by_keyword)) if by_keyword else None
    return _Prefilter(pattern, rules_for, tuple(everywhere))


@dataclass(frozen=True)
class Detector:
    """Immutable rule set + allow-list; safe to share between threads.

    Args:
        rules: Vendored, built-in and organisation rules, in the order findings are reported.
        allowlists: Allow-lists applied to every rule (the vendored file's global one).
        allow: Operator allow-list entries.
        fingerprint: Identifies the rule set, so caches of screened text know when to refold.
    """

    rules: tuple[Rule, ...]
    allowlists: tuple[Allowlist, ...] = ()
    allow: tuple[AllowEntry, ...] = ()
    fingerprint: str = "default"
    _prefilter: _Prefilter = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_prefilter", _prefilter(self.rules))

    def extended(self, *, rules: Sequence[Rule] = (), allow: Sequence[AllowEntry] = (), fingerprint: str) -> Detector:
        """This detector plus organisation ``rules`` and ``allow`` entries."""
        return Detector(self.rules + tuple(rules), self.allowlists, self.allow + tuple(allow), fingerprint)

    def scan(self, text: str, stats: ScanStats | None = None, *, first_per_rule: bool = False) -> list[Finding]:
        """Every credential in ``text``, in rule order then position (only each rule's first
        when ``first_per_rule``: enough to name the kinds, and cheaper on hostile input)."""
        stats = stats if stats is not None else ScanStats()
        stats.texts += 1
        stats.chars += len(text)
        hits: dict[int, list[tuple[int, int]]] = {}
        prefilter = self._prefilter
        if prefilter.pattern is not None:
            lowered = text.translate(_ASCII_LOWER) if not text.isascii() else text.lower()
            search, position = prefilter.pattern.search, 0
            # Restart one past each hit rather than at its end, so overlapping keywords are seen.
            while (match := search(lowered, position)) is not None:
                position = match.start() + 1
                stats.keyword_hits += 1
                span = match.span()
                for index in prefilter.rules_for[match.group()]:
                    hits.setdefault(index, []).append(span)
        for index in prefilter.everywhere:
            hits[index] = [(0, len(text))]
        findings: list[Finding] = []
        stats.rules_run += len(hits)
        for index in sorted(hits):
            found = self._run(self.rules[index], text, hits[index], stats)
            if first_per_rule:
                first = next(iter(found), None)
                findings.extend([first] if first is not None else [])
            else:
                findings.extend(found)
        return findings

    def kinds(self, text: str, stats: ScanStats | None = None) -> list[str]:
        """The distinct kinds found in ``text``, in rule order; never the values."""
        seen: dict[str, None] = {}
        for finding in self.scan(text, stats, first_per_rule=True):
            seen.setdefault(finding.kind, None)
        return list(seen)

    def _run(self, rule: Rule, text: str, spans: list[tuple[int, int]], stats: ScanStats) -> Iterable[Finding]:
        if rule.anchored:
            yield from self._run_anchored(rule, text, spans, stats)
            return
        for start, end in _windows(spans, rule.reach, len(text)):
            stats.windows += 1
            stats.window_chars += end - start
            for match in rule.pattern.finditer(text, start, end):
                if match.end() > match.start() and self._counts(rule, text, match, match.start()):
                    yield Finding(rule.id, match.start(), match.end())

    def _run_anchored(self, rule: Rule, text: str, spans: list[tuple[int, int]], stats: ScanStats
                      ) -> Iterable[Finding]:
        covered = 0
        for start, _end in spans:
            if start < covered:  # inside the last finding: a second keyword of the same assignment
                continue
            stats.anchored += 1
            match = rule.pattern.match(text, start, min(len(text), start + rule.reach))
            if match is None:
                continue
            lead = _lead_start(text, start, rule.lead)
            if self._counts(rule, text, match, lead):
                covered = match.end()
                yield Finding(rule.id, lead, match.end())

    def _counts(self, rule: Rule, text: str, match: re.Match[str], start: int) -> bool:
        secret = rule.secret_of(match)
        if rule.entropy and shannon_entropy(secret) <= rule.entropy:
            return False
        if rule.check is not None and not rule.check(secret):
            return False
        whole = text[start:match.end()]
        lists = self.allowlists + rule.allowlists
        if lists:
            # The line, at most LINE_CONTEXT characters either side (a 64 KiB line must not be
            # searched once per candidate).
            line_start = text.rfind("\n", max(0, start - LINE_CONTEXT), start) + 1 or max(0, start - LINE_CONTEXT)
            line_end = text.find("\n", match.end(), match.end() + LINE_CONTEXT)
            line = text[line_start:line_end if line_end >= 0 else min(len(text), match.end() + LINE_CONTEXT)]
            if any(allow.allows(secret=secret, match=whole, line=line) for allow in lists):
                return False
        return not any(entry.pattern.search(whole) for entry in self.allow)


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _lead_start(text: str, at: int, limit: int) -> int:
    """Where the name around a keyword starts: up to ``limit`` ``[\\w.-]`` characters back."""
    start = at
    while start > 0 and at - start < limit and text[start - 1] in _NAME_CHARS:
        start -= 1
    return start


def _windows(spans: list[tuple[int, int]], reach: int, size: int) -> Iterable[tuple[int, int]]:
    """Merged ``[start - reach, end + reach)`` windows around ``spans`` (already in order)."""
    current_start, current_end = -1, -1
    for start, end in spans:
        low, high = max(0, start - reach), min(size, end + reach)
        if low <= current_end:
            current_end = max(current_end, high)
            continue
        if current_end >= 0:
            yield current_start, current_end
        current_start, current_end = low, high
    if current_end >= 0:
        yield current_start, current_end
