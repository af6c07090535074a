"""A deterministic, extractive summary: what the playbook provider writes when asked to compact.

It reads the transcript of :func:`loop.compaction.prompt.render_transcript` and keeps, in order, the
``MUST KEEP`` lines (intent, decisions, open questions), then the salient facts (error strings,
paths, identifiers, numbers): the most salient few of each tenth of the transcript, bounded in
tokens. It ranks tokens as the probes do, so it is a strong baseline, not a neutral one. No model, no network:
the same transcript always yields the same summary, so tests and a fresh ``make run`` exercise
compaction for real.
"""

from __future__ import annotations

from loop.compaction.probes import candidates
from loop.compaction.prompt import MUST_KEEP, TRANSCRIPT
from loop.compaction.tokens import count_tokens

_FACTS = 60
_PARTS = 10


def _spread_facts(lines: list[str]) -> list[str]:
    """The most salient tokens of each tenth of the transcript, so late history is kept like early."""
    facts: list[str] = []
    seen: set[str] = set()
    n = len(lines)
    for part in range(_PARTS):
        chunk = "\n".join(lines[part * n // _PARTS:(part + 1) * n // _PARTS])
        taken = 0
        for *_key, token, _category in candidates(chunk):
            if taken == _FACTS // _PARTS:
                break
            if token.lower() not in seen:
                seen.add(token.lower())
                facts.append(token)
                taken += 1
    return facts


def extractive_summary(transcript: str, *, max_tokens: int = 2_000) -> str:
    """A summary of ``transcript`` under ``max_tokens`` (line by line, never mid-line)."""
    head, _, body = transcript.partition(f"\n{TRANSCRIPT}:")
    kept = [line[2:] for line in head.splitlines() if line.startswith("- ") and not line.startswith(MUST_KEEP)]
    facts = _spread_facts(body.splitlines())
    lines = ["Summary of the earlier conversation (extractive)."]
    lines += kept
    if facts:
        lines.append("Facts: " + ", ".join(facts))
    out: list[str] = []
    used = 0
    for line in lines:
        cost = count_tokens(line) + 1
        if used + cost > max_tokens:
            break
        out.append(line)
        used += cost
    return "\n".join(out)
