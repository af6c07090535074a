"""A deterministic, extractive summary: what the playbook provider writes when asked to compact.

It reads the transcript of :func:`loop.compaction.prompt.render_transcript` and keeps, in order, the
``MUST KEEP`` lines (intent, decisions, open questions), then the salient facts (error strings,
paths, identifiers, numbers) in order of first appearance, bounded in tokens. No model, no network:
the same transcript always yields the same summary, so tests and a fresh ``make run`` exercise
compaction for real.
"""

from __future__ import annotations

from loop.compaction.probes import candidates
from loop.compaction.prompt import MUST_KEEP, TRANSCRIPT
from loop.compaction.tokens import count_tokens

_FACTS = 60


def extractive_summary(transcript: str, *, max_tokens: int = 2_000) -> str:
    """A summary of ``transcript`` under ``max_tokens`` (line by line, never mid-line)."""
    head, _, body = transcript.partition(f"\n{TRANSCRIPT}:")
    kept = [line[2:] for line in head.splitlines() if line.startswith("- ") and not line.startswith(MUST_KEEP)]
    ranked = sorted(candidates(body), key=lambda c: c[3])  # first appearance
    facts = [token for *_key, token, _category in ranked][:_FACTS]
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
