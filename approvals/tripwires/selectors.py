"""Credential tripwire reads (SPEC L16): the organisation's rules for the kernel, and the active
rule set as the admin shows it."""

from __future__ import annotations

from dataclasses import dataclass

from approvals.models import TripwireAllowEntry, TripwirePattern
from loop.tripwires import Detector, OrgPattern, default_detector, organisation_detector


def tripwire_rule_set() -> tuple[tuple[OrgPattern, ...], tuple[tuple[str, str], ...]]:
    """The enabled organisation patterns and allow-list entries (regex, reason), in two queries."""
    patterns = tuple(
        OrgPattern(name=row.name, regex=row.regex, keywords=row.keyword_list)
        for row in TripwirePattern.objects.filter(enabled=True).order_by("name")
    )
    allow = tuple(TripwireAllowEntry.objects.filter(enabled=True).order_by("id").values_list("regex", "reason"))
    return patterns, allow


def tripwire_detector() -> Detector:
    """The detector the deployment applies now: vendored and built-in rules plus the organisation's."""
    patterns, allow = tripwire_rule_set()
    return organisation_detector(patterns, allow)


@dataclass(frozen=True, slots=True)
class RuleRow:
    id: str
    source: str
    keywords: str
    description: str


def active_rules(detector: Detector | None = None) -> list[RuleRow]:
    """Every rule the detector runs, in report order, as the admin's read-only list shows it."""
    detector = detector or default_detector()
    return [RuleRow(rule.id, rule.source, ", ".join(rule.keywords) or "(every text)", rule.description)
            for rule in detector.rules]
