"""Plan: what applying a document would change, in words and as JSON. Reads only; changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from approvals.policy_doc.diff import Change, policy_diff
from approvals.policy_doc.document import PolicyDoc, digest
from approvals.policy_doc.history import DEFAULT_DAYS, recorded_decisions
from approvals.policy_doc.impact import Impact, Linker, impact_preview
from approvals.policy_doc.lint import Warning, document_warnings
from approvals.policy_doc.live import policy_live
from approvals.policy_doc.members import members_resolve
from approvals.policy_doc.parse import PolicyInvalid


@dataclass(frozen=True, slots=True)
class Plan:
    live_digest: str  # pass it to apply as expect_digest
    digest: str  # the document's: what the live digest will be once it is applied
    changes: tuple[Change, ...]
    warnings: tuple[Warning, ...]
    impact: Impact | None

    def words(self, link: Linker | None = None) -> list[str]:
        lines = [f"Live policy {self.live_digest[:12]}, document {self.digest[:12]}."]
        if not self.changes:
            lines.append("No changes: the live configuration already is this document.")
        else:
            lines.append(f"{_count(len(self.changes), 'change')}:")
            lines += [f"  {change.words()}" for change in self.changes]
        if self.warnings:
            lines.append(f"{_count(len(self.warnings), 'warning')}:")
            lines += [f"  {w.path}: {w.message}" for w in self.warnings]
        if self.impact is not None:
            lines.append("Impact on recorded calls:")
            lines += [f"  {line}" for line in self.impact.words(link)]
        lines.append(f"Apply exactly this plan with --expect-digest {self.live_digest}")
        return lines

    def as_dict(self, link: Linker | None = None) -> dict[str, Any]:
        return {"live_digest": self.live_digest, "digest": self.digest,
                "changes": [change.as_dict() for change in self.changes],
                "warnings": [w.as_dict() for w in self.warnings],
                "impact": self.impact.as_dict(link) if self.impact is not None else None}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def policy_plan(doc: PolicyDoc, *, days: int | None = DEFAULT_DAYS) -> Plan:
    """The diff against the live configuration, the document's lint warnings and (unless ``days`` is
    ``None``) the impact on the last ``days`` days of recorded gate decisions.

    Raises:
        PolicyInvalid: a group names a user or an agent that does not exist.
    """
    _, _, problems = members_resolve(doc)
    if problems:
        raise PolicyInvalid(problems)
    live = policy_live()
    impact = None
    if days is not None:
        history = recorded_decisions(days=days)
        impact = impact_preview(history.decisions, doc, days=days)
        notes: list[str] = []
        drift = impact_preview(history.decisions, live).changed
        if drift:
            notes.append(f"{drift} of these calls would already be decided differently by the live policy (it "
                         "changed since they were recorded); their transitions are counted above too.")
        if history.missing:
            notes.append(f"{history.missing} recorded decisions were left out: their calls no longer exist.")
        impact = replace(impact, notes=tuple(notes))
    return Plan(live_digest=digest(live), digest=digest(doc), changes=tuple(policy_diff(live, doc)),
                warnings=tuple(document_warnings(doc)), impact=impact)
