"""The approval rule engine: a pure function from (tool, args, rule sets) to a decision.

Semantics (SPEC A1/A2), fixed:

1. No scope (``rule_sets is None``) → deny. A call is never run with permissive defaults.
2. The sets are the global rules plus one set per security group the turn's user or agent
   belongs to. Within one set, the enabled matching rule with the lowest priority decides; ties
   at that priority go to the most restrictive action (deny > require > allow), then to the rule
   listed first. A set with no matching rule contributes nothing.
3. Across sets the most restrictive contribution wins (deny > require > allow); ties go to the
   set listed first. Groups can only restrict what the global rules allow, never widen it.
4. No set contributes → deny ("no matching rule").
5. A rule matches when ``fnmatchcase(tool, tool_pattern)`` and every argument matcher matches:
   the path is split on ``.`` and indexes into mappings (by key) and lists (by decimal index);
   the value found is a string as is, anything else as JSON; it must ``fnmatchcase`` the glob.
   A missing path means the rule does not match. A path that starts with ``$`` reads the call's
   *facts* instead of its arguments (``$mcp.trust``, ``$mcp.readOnlyHint``: what Skald knows about
   the tool, never what the model sent); a call without that fact does not match.
6. Disabled rules are skipped (and listed as skipped in the trace). An enabled malformed rule
   (unknown action, matchers that are not a mapping of strings to strings, a non-integer
   priority, …) or any exception inside the engine denies the call: the engine fails closed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

Action = Literal["allow", "deny", "require"]
ACTIONS: tuple[Action, ...] = ("allow", "require", "deny")
# How restrictive an action is; the higher value wins ties and cross-set conflicts.
SEVERITY: Mapping[str, int] = {"allow": 0, "require": 1, "deny": 2}

TraceResult = Literal["match", "no_match", "skipped"]


class MalformedRule(ValueError):
    """A rule the engine cannot evaluate; the call it would judge is denied."""


@dataclass(frozen=True, slots=True)
class RuleView:
    """A rule as the engine sees it: plain values, no ORM."""

    id: int | None
    group_id: int | None
    group_name: str | None
    tool_pattern: str
    arg_matchers: Mapping[str, str]
    action: str
    priority: int
    enabled: bool = True
    approval_ttl: int | None = None  # seconds; expiry of the approvals a ``require`` raises
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "group": None if self.group_id is None else {"id": self.group_id, "name": self.group_name},
            "tool_pattern": self.tool_pattern,
            "arg_matchers": _jsonable(self.arg_matchers),
            "action": self.action,
            "priority": self.priority,
            "enabled": self.enabled,
            "approval_ttl": self.approval_ttl,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class RuleSet:
    """``"global"`` or ``"group:<name>"`` with its rules, in the order ties should resolve."""

    name: str
    rules: Sequence[RuleView]


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One rule considered: whether it matched, and whether it decided its set (``chosen``)."""

    rule_set: str
    rule: RuleView
    result: TraceResult
    detail: str = ""
    chosen: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"rule_set": self.rule_set, "rule": self.rule.as_dict(), "result": self.result,
                "detail": self.detail, "chosen": self.chosen}


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    rule: RuleView | None
    trace: tuple[TraceEntry, ...]
    reason: str
    rule_set: str | None = None

    @property
    def faulted(self) -> bool:
        return self.reason.startswith("engine fault")


def check(tool: str, args: Mapping[str, Any], rule_sets: Sequence[RuleSet] | None,
          facts: Mapping[str, Any] | None = None) -> Decision:
    """Decide one call. Pure; never raises: any fault is a deny naming the fault. ``facts``: what
    ``$`` matcher paths read (rule 5)."""
    if rule_sets is None:
        return Decision("deny", None, (), "no scope")
    try:
        return _check(tool, args, rule_sets, facts or {})
    except Exception as exc:  # noqa: BLE001 - fail closed on anything, including our own bugs
        return Decision("deny", None, (), f"engine fault: {type(exc).__name__}: {exc}")


def _check(tool: str, args: Mapping[str, Any], rule_sets: Sequence[RuleSet], facts: Mapping[str, Any]) -> Decision:
    if not isinstance(tool, str):
        raise TypeError(f"tool name must be a string, got {type(tool).__name__}")
    if not isinstance(args, Mapping):
        raise TypeError(f"arguments must be a mapping, got {type(args).__name__}")
    for rule_set in rule_sets:
        for rule in rule_set.rules:
            _validate(rule)

    trace: list[TraceEntry] = []
    best: tuple[RuleSet, RuleView] | None = None
    for rule_set in rule_sets:
        entries = [_consider(rule_set.name, rule, tool, args, facts) for rule in rule_set.rules]
        winner = _set_winner(entries)
        if winner is not None:
            entries[winner] = _chosen(entries[winner])
            rule = entries[winner].rule
            if best is None or SEVERITY[rule.action] > SEVERITY[best[1].action]:
                best = (rule_set, rule)
        trace.extend(entries)

    if best is None:
        return Decision("deny", None, tuple(trace), "no matching rule")
    rule_set, rule = best
    action: Action = rule.action  # type: ignore[assignment]  # validated above
    reason = f"{rule_set.name}: rule {rule.id} {rule.action} {rule.tool_pattern!r} @{rule.priority}"
    return Decision(action, rule, tuple(trace), reason, rule_set.name)


def _validate(rule: RuleView) -> None:
    if not isinstance(rule, RuleView):
        raise MalformedRule(f"not a rule: {type(rule).__name__}")
    if not isinstance(rule.enabled, bool):
        raise MalformedRule(f"rule {rule.id}: enabled must be a boolean")
    if not rule.enabled:
        return  # skipped whatever it holds: disabling a broken rule is how an operator parks it
    if rule.action not in SEVERITY:
        raise MalformedRule(f"rule {rule.id}: unknown action {rule.action!r}")
    if not isinstance(rule.tool_pattern, str) or not rule.tool_pattern:
        raise MalformedRule(f"rule {rule.id}: tool pattern must be a non-empty string")
    if isinstance(rule.priority, bool) or not isinstance(rule.priority, int):
        raise MalformedRule(f"rule {rule.id}: priority must be an integer")
    if not isinstance(rule.arg_matchers, Mapping):
        raise MalformedRule(f"rule {rule.id}: argument matchers must be an object")
    for path, glob in rule.arg_matchers.items():
        if not isinstance(path, str) or not isinstance(glob, str):
            raise MalformedRule(f"rule {rule.id}: argument matchers must map strings to strings")


def _consider(set_name: str, rule: RuleView, tool: str, args: Mapping[str, Any], facts: Mapping[str, Any]
              ) -> TraceEntry:
    if not rule.enabled:
        return TraceEntry(set_name, rule, "skipped", "disabled")
    if not fnmatchcase(tool, rule.tool_pattern):
        return TraceEntry(set_name, rule, "no_match", f"tool {tool!r} does not match {rule.tool_pattern!r}")
    for path, glob in rule.arg_matchers.items():
        fact = path.startswith("$")
        found, value = arg_lookup(facts, path[1:]) if fact else arg_lookup(args, path)
        if not found:
            return TraceEntry(set_name, rule, "no_match", f"{'fact' if fact else 'argument'} {path!r} is missing")
        text = arg_text(value)
        if not fnmatchcase(text, glob):
            return TraceEntry(set_name, rule, "no_match",
                              f"{'fact' if fact else 'argument'} {path!r}={text!r} does not match {glob!r}")
    return TraceEntry(set_name, rule, "match")


def _set_winner(entries: Sequence[TraceEntry]) -> int | None:
    """Index of the deciding entry: lowest priority, then most restrictive, then first listed."""
    winner: int | None = None
    for index, entry in enumerate(entries):
        if entry.result != "match":
            continue
        if winner is None:
            winner = index
            continue
        current = entries[winner].rule
        rule = entry.rule
        if rule.priority < current.priority or (
            rule.priority == current.priority and SEVERITY[rule.action] > SEVERITY[current.action]
        ):
            winner = index
    return winner


def _chosen(entry: TraceEntry) -> TraceEntry:
    return TraceEntry(entry.rule_set, entry.rule, entry.result, entry.detail, chosen=True)


def arg_lookup(args: Any, path: str) -> tuple[bool, Any]:
    """Follow a dotted path (``argv.0``, ``options.mode``) into mappings and lists."""
    current = args
    for segment in path.split("."):
        if isinstance(current, Mapping):
            if segment not in current:
                return False, None
            current = current[segment]
        elif isinstance(current, list | tuple):
            if not (segment.isascii() and segment.isdecimal()) or int(segment) >= len(current):
                return False, None
            current = current[int(segment)]
        else:
            return False, None
    return True, current


def arg_text(value: Any) -> str:
    """What a matcher's glob is compared with: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _jsonable(matchers: Any) -> Any:
    """Matchers for display; a malformed value is shown as its repr rather than breaking explain."""
    try:
        json.dumps(matchers)
    except (TypeError, ValueError):
        return repr(matchers)
    return dict(matchers) if isinstance(matchers, Mapping) else matchers
