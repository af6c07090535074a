"""Probes: a deterministic, lexical measure of what a compaction summary lost (SPEC L14).

How probes are drawn, from the covered messages exactly as the model saw them (masked), and only
from what they actually contain:

1. The covered messages are split, in order, into :data:`PROBE_COUNT` (10) contiguous slices of
   near-equal message count (slot ``i`` takes messages ``[i*n//10, (i+1)*n//10)``).
2. In each slice every salient token is a candidate, in four categories ranked by how much a
   later turn depends on it: error strings (``TimeoutError``, ``errno 110``, ``HTTP 503``), file
   paths (``/var/log/app.log``, ``src/x.py``), identifiers (``snake_case``, ``camelCase``, ``ABC-123``,
   hex ids of 8+ digits) and numbers (``1.2.3``, 3+ digits). A candidate the slice does not hold as a
   whole token (the same test a summary is scored by) is no candidate.
3. A slot's probe is its best candidate not already taken by an earlier slot: lowest category rank,
   then most occurrences in the slice, then longest, then first position.
4. A slot whose slice offers nothing new takes, in slot order, the best candidate not yet taken
   from all the covered messages (same ranking). When the covered messages hold fewer than ten
   salient tokens there are fewer probes: a probe is never empty, and never a token that is not
   there (draw ``1``, the first release's, left a slice without a token as an empty probe, so a
   short covered prefix was a weak baseline whatever the summary lost; replay-verify re-draws a
   stored report by the draw it names).

A probe is *answerable before compaction* when the covered messages contain it as a whole token,
case-insensitively, and *kept* when the summary does. Loss is integer per mille of the answerable
probes: ``(pre - post) * 1000 // pre``. No answerable probe, or fewer than half the probes
answerable, is a weak baseline: the result is ``no_signal`` and never ``degraded``. Since every
probe is drawn from the covered messages, that only happens when they hold no salient token at all:
a summary that loses every probe reads ``degraded``. Otherwise a loss at or above the latch
threshold (500 ‰) is ``degraded``.

Limits: the probes are lexical, local and integer. A summary that keeps the tokens and loses
their meaning scores well; one that paraphrases an identifier scores it lost.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from loop.compaction.policy import LATCH_PERMILLE

PROBE_COUNT = 10
DRAW = 2  # the draw a new report names (module docstring, step 4)
Result = Literal["ok", "no_signal", "degraded"]

_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("error", re.compile(
        r"\b[A-Z][A-Za-z]*(?:Error|Exception|Failure|Timeout)\b"
        r"|\b(?:errno|ERR|E)[ _-]?\d{2,5}\b"
        r"|\bHTTP [45]\d\d\b"
        r"|\bexit (?:code|status) \d+\b")),
    ("path", re.compile(
        r"(?<![\w/.-])(?:/[\w.@-]+){2,}/?"
        r"|\b[\w-]+(?:/[\w.-]+)+\.\w{1,6}\b"
        r"|\b[\w-]+\.(?:py|js|ts|go|rs|java|log|conf|cfg|yaml|yml|json|toml|sql|sh|txt|md|ini|csv)\b")),
    ("identifier", re.compile(
        r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b"
        r"|\b[a-z]+[A-Z][A-Za-z0-9]+\b"
        r"|\b[A-Z][A-Z0-9]+-\d+\b"
        r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")),
    ("number", re.compile(r"\b\d+(?:\.\d+){1,3}\b|\b\d{3,}\b")),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Probe:
    slot: int
    category: str
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"slot": self.slot, "category": self.category, "text": self.text}


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """The measure of one compaction: what its ``control:compaction_probe`` row records."""

    probes: tuple[Probe, ...]
    pre: tuple[bool, ...]
    post: tuple[bool, ...]
    latch_permille: int = LATCH_PERMILLE
    draw: int = DRAW

    @property
    def pre_hits(self) -> int:
        return sum(self.pre)

    @property
    def post_hits(self) -> int:
        return sum(1 for before, after in zip(self.pre, self.post, strict=True) if before and after)

    @property
    def lost_permille(self) -> int:
        return (self.pre_hits - self.post_hits) * 1000 // self.pre_hits if self.pre_hits else 0

    @property
    def weak_baseline(self) -> bool:
        return self.pre_hits == 0 or self.pre_hits * 2 < len(self.probes)

    @property
    def result(self) -> Result:
        if self.weak_baseline:
            return "no_signal"
        return "degraded" if self.lost_permille >= self.latch_permille else "ok"

    @property
    def degraded(self) -> bool:
        return self.result == "degraded"

    def as_payload(self) -> dict[str, Any]:
        return {
            "probes": [{**p.as_dict(), "pre": before, "post": after}
                       for p, before, after in zip(self.probes, self.pre, self.post, strict=True)],
            "pre_hits": self.pre_hits, "post_hits": self.post_hits, "lost_permille": self.lost_permille,
            "result": self.result, "degraded": self.degraded, "latched": self.degraded,
            "latch_permille": self.latch_permille, "draw": self.draw,
        }


def candidates(text: str, *, whole: bool = False) -> list[tuple[int, int, int, int, str, str]]:
    """Sort keys and texts of every salient token in ``text``; with ``whole``, only those ``text``
    holds as a whole token (as :func:`contains_token` finds them)."""
    found: dict[str, tuple[int, int, str]] = {}
    counts: Counter[str] = Counter()
    for rank, (category, pattern) in enumerate(_CATEGORIES):
        for match in pattern.finditer(text):
            token = match.group(0).strip()
            if len(token) < 3:
                continue
            counts[token] += 1
            if token not in found or found[token][0] > rank:
                found[token] = (rank, match.start(), category)
    return sorted((rank, -counts[token], -len(token), position, token, category)
                  for token, (rank, position, category) in found.items()
                  if not whole or contains_token(text, token))


def draw_probes(texts: Sequence[str], count: int = PROBE_COUNT, *, draw: int = DRAW) -> tuple[Probe, ...]:
    """The probes of the covered messages ``texts`` (in window order): same texts, same probes.

    ``draw`` 2 (the default) draws only what ``texts`` contain; ``draw`` 1 re-draws a report of the
    first release, empty probes and all (module docstring)."""
    n = len(texts)
    whole = draw >= 2
    taken: set[str] = set()
    slots: list[tuple[str, str] | None] = []
    for slot in range(count):
        chunk = "\n".join(texts[slot * n // count:(slot + 1) * n // count])
        choice = next(((token, category) for *_key, token, category in candidates(chunk, whole=whole)
                       if token.lower() not in taken), None)
        if choice is not None:
            taken.add(choice[0].lower())
        slots.append(choice)
    if not whole:
        return tuple(Probe(slot, choice[1], choice[0]) if choice else Probe(slot, "", "")
                     for slot, choice in enumerate(slots))
    spare = ((token, category) for *_key, token, category in candidates("\n".join(texts), whole=True))
    probes: list[Probe] = []
    for slot, choice in enumerate(slots):
        if choice is None:
            choice = next(((token, category) for token, category in spare if token.lower() not in taken), None)
            if choice is None:
                continue
            taken.add(choice[0].lower())
        probes.append(Probe(slot, choice[1], choice[0]))
    return tuple(probes)


def contains_token(text: str, token: str) -> bool:
    """Whether ``token`` occurs in ``text`` as a whole token (not inside a longer word)."""
    if not token:
        return False
    return re.search(r"(?<![\w])" + re.escape(token) + r"(?![\w])", text, re.IGNORECASE) is not None


def score(probes: Sequence[Probe], *, before: str, summary: str, latch_permille: int = LATCH_PERMILLE,
          draw: int = DRAW) -> ProbeReport:
    """Check each probe against the text before compaction and against the summary; ``draw`` names
    how the probes were drawn (:func:`draw_probes`)."""
    pre = tuple(contains_token(before, p.text) for p in probes)
    post = tuple(contains_token(summary, p.text) for p in probes)
    return ProbeReport(tuple(probes), pre, post, latch_permille, draw)
