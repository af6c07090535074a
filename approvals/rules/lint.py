"""Rules that can never win, found before they silently do nothing (pure; the admin shows them).

Two ways a rule is dead under the engine's semantics (see :mod:`approvals.rules.engine`):

1. **Shadowed in its own set**: an enabled rule of the same set with no argument matchers covers
   every call the rule could match (its pattern is ``*`` or the same pattern, or matches the rule's
   literal tool name) and wins first: a lower priority number, or the same priority with an action
   at least as restrictive, listed earlier.
2. **Overruled across sets** (a group rule only): for the rule's literal tool name, with any
   arguments, the global set always decides something more restrictive — across sets the most
   restrictive answer wins, so a group can tighten the global rules but never widen them.

Only certain cases are reported: a rule whose death depends on arguments is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from approvals.rules.engine import SEVERITY, RuleSet, RuleView

GLOB_CHARS = frozenset("*?[")


def _literal(pattern: str) -> bool:
    return not (set(pattern) & GLOB_CHARS)


def _covers(wide: RuleView, narrow: RuleView) -> bool:
    """Every call ``narrow`` can match, ``wide`` matches too (decidable cases only)."""
    if wide.arg_matchers:
        return False
    if wide.tool_pattern in ("*", narrow.tool_pattern):
        return True
    return _literal(narrow.tool_pattern) and fnmatchcase(narrow.tool_pattern, wide.tool_pattern)


def _beats(first: RuleView, second: RuleView, first_listed: bool) -> bool:
    if first.priority != second.priority:
        return first.priority < second.priority
    if SEVERITY[first.action] != SEVERITY[second.action]:
        return SEVERITY[first.action] > SEVERITY[second.action]
    return first_listed


def _always_decides(rules: Sequence[RuleView], tool: str) -> RuleView | None:
    """The rule a set picks for ``tool`` whatever the arguments, if that is certain."""
    candidates = [r for r in rules if r.enabled and fnmatchcase(tool, r.tool_pattern)]
    unconditional = [r for r in candidates if not r.arg_matchers]
    if not unconditional:
        return None
    best = min(unconditional, key=lambda r: (r.priority, -SEVERITY[r.action]))
    # A conditional rule that would win when it matches makes the outcome depend on arguments.
    if any(r.arg_matchers and _beats(r, best, True) for r in candidates):
        return None
    return best


def rule_warnings(rule: RuleView, rule_sets: Sequence[RuleSet], *, global_set: str = "global") -> list[str]:
    """Why ``rule`` can never decide a call, as sentences (empty: it can)."""
    if not rule.enabled or rule.action not in SEVERITY:
        return []
    own = next((s for s in rule_sets if any(r.id == rule.id for r in s.rules)), None)
    warnings: list[str] = []
    if own is not None:
        ids = [r.id for r in own.rules]
        for other in own.rules:
            if other.id == rule.id or not other.enabled or other.action not in SEVERITY:
                continue
            if _covers(other, rule) and _beats(other, rule, ids.index(other.id) < ids.index(rule.id)):
                warnings.append(f"Never wins: rule #{other.id} ({other.action} {other.tool_pattern!r} "
                                f"@{other.priority}) matches every call this rule matches and is tried first.")
                break
    if rule.group_id is not None and _literal(rule.tool_pattern):
        glob = next((s for s in rule_sets if s.name == global_set), None)
        decider = _always_decides(glob.rules, rule.tool_pattern) if glob else None
        if decider is not None and SEVERITY[decider.action] > SEVERITY[rule.action]:
            warnings.append(f"Never takes effect: the global rule #{decider.id} ({decider.action} "
                            f"{decider.tool_pattern!r} @{decider.priority}) is stricter, and across rule sets "
                            "the stricter answer wins; groups can only tighten the global rules.")
    return warnings
