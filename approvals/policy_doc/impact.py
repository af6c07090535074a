"""Impact preview: recorded gate decisions re-decided under a proposed policy (pure, batched).

Each recorded call is decided again by the pure engine (:func:`approvals.rules.engine.check`) with
the rule sets the proposed document gives its user and agent: the global rules, then one set per
group naming the user or the agent, by group name, as :func:`approvals.rules.selectors.rule_sets_for`
builds them from the database. Nothing runs: no provider, no tool.

Batching (:class:`_Batch`): rule sets per scope, candidate rules per (scope, tool), one decision per
(scope, tool) when no candidate looks at arguments. :func:`redecide` is the call-by-call reference
the differential test checks the batch against (``tests/approvals/test_policy_doc_impact.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from approvals.policy_doc.document import PolicyDoc, RuleDoc
from approvals.rules.engine import SEVERITY, RuleSet, RuleView, arg_lookup, arg_text, check
from approvals.rules.selectors import GLOBAL_SET, group_set_name

# How a transition reads: "allowed → approval".
VERDICT_WORDS: Mapping[str, str] = {"allow": "allowed", "require": "approval", "deny": "denied"}
TOP_CALLS = 10
# Call id → where a reader can see the call (the composition layer knows the admin's URLs).
Linker = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """One gate decision as recorded: the call, who made it (username, agent), what it asked, the verdict."""

    call_id: str
    tool: str
    args: Any
    action: str
    user: str | None
    agent: str | None
    arguments_hash: str = ""


@dataclass(frozen=True, slots=True)
class ChangedCall:
    """Calls with one tool and one argument hash whose verdict would change the same way."""

    tool: str
    arguments_hash: str
    before: str
    after: str
    count: int
    call_ids: tuple[str, ...]  # the first few, for links

    def as_dict(self, link: Linker | None = None) -> dict[str, Any]:
        data = {"tool": self.tool, "arguments_hash": self.arguments_hash, "before": self.before, "after": self.after,
                "transition": transition(self.before, self.after), "count": self.count,
                "call_ids": list(self.call_ids)}
        if link is not None:
            data["links"] = [link(call_id) for call_id in self.call_ids]
        return data


@dataclass(frozen=True, slots=True)
class Impact:
    """What a proposed policy would have decided differently over a history of recorded decisions."""

    total: int
    changed: int
    transitions: dict[str, int]  # "allowed → approval" → count, changed calls only
    loosened: int  # changed to a less restrictive verdict
    tightened: int
    top_calls: tuple[ChangedCall, ...]
    users: dict[str, int]  # username → changed calls
    agents: dict[str, int]
    days: int | None = None
    notes: tuple[str, ...] = field(default=())

    def words(self, link: Linker | None = None) -> list[str]:
        span = f"in the last {self.days} days" if self.days is not None else "in the history given"
        if not self.total:
            return [f"No gate decisions were recorded {span}: the preview has nothing to re-decide."]
        lines = [f"{self.changed} of {self.total} recorded calls {span} would be decided differently."]
        if self.changed:
            lines.append(f"{self.loosened} would loosen and {self.tightened} would tighten; "
                         f"{_count(len(self.users), 'user')} and {_count(len(self.agents), 'agent')} are affected.")
            lines += [f"  {name}: {count}" for name, count in self.transitions.items()]
            lines.append("Most frequent changed calls:")
            show = link or (lambda call_id: f"call {call_id}")
            lines += [f"  {_count(call.count, 'call')} of {call.tool} ({transition(call.before, call.after)}), "
                      f"e.g. {', '.join(show(i) for i in call.call_ids)}" for call in self.top_calls]
        return lines + list(self.notes)

    def as_dict(self, link: Linker | None = None) -> dict[str, Any]:
        return {"days": self.days, "total": self.total, "changed": self.changed, "transitions": self.transitions,
                "loosened": self.loosened, "tightened": self.tightened,
                "top_calls": [call.as_dict(link) for call in self.top_calls], "users": self.users,
                "agents": self.agents, "notes": list(self.notes)}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def transition(before: str, after: str) -> str:
    return f"{VERDICT_WORDS.get(before, before)} → {VERDICT_WORDS.get(after, after)}"


def _views(rules: Iterable[RuleDoc], group_id: int | None, group_name: str | None) -> tuple[RuleView, ...]:
    return tuple(RuleView(id=None, group_id=group_id, group_name=group_name, tool_pattern=r.tool,
                          arg_matchers=dict(r.args), action=r.action, priority=r.priority, enabled=r.enabled,
                          approval_ttl=r.approval_ttl, note=r.note) for r in rules)


def rule_sets_for(doc: PolicyDoc, *, user: str | None, agent: str | None) -> list[RuleSet] | None:
    """The sets the proposed document gives a call's scope (``None``: no scope, which denies)."""
    if user is None and not agent:
        return None
    sets = [RuleSet(GLOBAL_SET, _views(doc.rules, None, None))]
    for index, group in enumerate(doc.groups):
        if (user is not None and user in group.users) or (agent and agent in group.agents):
            sets.append(RuleSet(group_set_name(group.name), _views(group.rules, index + 1, group.name)))
    return sets


def redecide(record: RecordedDecision, doc: PolicyDoc) -> str:
    """The reference: one call, decided from scratch under ``doc``."""
    return check(record.tool, record.args, rule_sets_for(doc, user=record.user, agent=record.agent)).action


_Candidate = tuple[tuple[tuple[str, str], ...], str]  # (argument matchers, action)


class _Batch:
    """The proposed policy compiled once for many calls.

    Per scope (the groups a user and agent select) the rule sets are built once; per (scope, tool)
    each set's candidates are the enabled rules whose pattern matches the tool, in the order the
    engine prefers them (priority, then most restrictive, then listed first), so a call's set winner
    is its first candidate whose argument matchers match. When no candidate has matchers the
    decision is the same for every call of that tool and is kept. Anything unusual (a tool that is
    not a string, arguments that are not a mapping, a rule the engine would refuse) goes to
    :func:`approvals.rules.engine.check` itself.
    """

    def __init__(self, doc: PolicyDoc) -> None:
        self.global_set = RuleSet(GLOBAL_SET, _views(doc.rules, None, None))
        self.group_sets = [RuleSet(group_set_name(g.name), _views(g.rules, i + 1, g.name))
                           for i, g in enumerate(doc.groups)]
        self.by_user: dict[str, set[int]] = {}
        self.by_agent: dict[str, set[int]] = {}
        for index, group in enumerate(doc.groups):
            for user in group.users:
                self.by_user.setdefault(user, set()).add(index)
            for agent in group.agents:
                self.by_agent.setdefault(agent, set()).add(index)
        self.scopes: dict[tuple[str | None, str | None], tuple[int, ...]] = {}
        self.sets: dict[tuple[int, ...], list[RuleSet]] = {}
        self.sound: dict[tuple[int, ...], bool] = {}
        self.compiled: dict[tuple[tuple[int, ...], str], tuple[list[list[_Candidate]], str | None]] = {}

    def _signature(self, user: str | None, agent: str | None) -> tuple[int, ...]:
        found = self.scopes.get((user, agent))
        if found is None:
            groups = (self.by_user.get(user, set()) if user is not None else set()) | (
                self.by_agent.get(agent, set()) if agent else set())
            found = self.scopes[(user, agent)] = tuple(sorted(groups))
        return found

    def _compile(self, signature: tuple[int, ...], tool: str) -> tuple[list[list[_Candidate]], str | None]:
        sets = self.sets[signature]
        candidates: list[list[_Candidate]] = []
        for rule_set in sets:
            matching = [(rule.priority, -SEVERITY[rule.action], index, rule)
                        for index, rule in enumerate(rule_set.rules)
                        if rule.enabled and fnmatchcase(tool, rule.tool_pattern)]
            matching.sort(key=lambda item: item[:3])
            candidates.append([(tuple(item[3].arg_matchers.items()), item[3].action) for item in matching])
        constant = None
        if not any(matchers for per_set in candidates for matchers, _ in per_set):
            constant = check(tool, {}, sets).action  # the arguments cannot change it
        return candidates, constant

    def decide(self, record: RecordedDecision) -> str:
        tool, args = record.tool, record.args
        if record.user is None and not record.agent:
            return check(tool, args, None).action
        signature = self._signature(record.user, record.agent)
        sets = self.sets.get(signature)
        if sets is None:
            sets = self.sets[signature] = [self.global_set, *(self.group_sets[i] for i in signature)]
            self.sound[signature] = not check("", {}, sets).faulted
        if not (isinstance(tool, str) and isinstance(args, Mapping) and self.sound[signature]):
            return check(tool, args, sets).action
        compiled = self.compiled.get((signature, tool))
        if compiled is None:
            compiled = self.compiled[(signature, tool)] = self._compile(signature, tool)
        candidates, constant = compiled
        if constant is not None:
            return constant
        best: str | None = None
        try:
            for per_set in candidates:
                for matchers, action in per_set:
                    if _matches(matchers, args):
                        if best is None or SEVERITY[action] > SEVERITY[best]:
                            best = action
                        break
        except Exception:  # noqa: BLE001 - whatever it is, the engine's own answer is the reference
            return check(tool, args, sets).action
        return best if best is not None else "deny"


def _matches(matchers: tuple[tuple[str, str], ...], args: Mapping[str, Any]) -> bool:
    for path, glob in matchers:
        found, value = arg_lookup(args, path)
        if not found or not fnmatchcase(arg_text(value), glob):
            return False
    return True


def impact_preview(records: Iterable[RecordedDecision], doc: PolicyDoc, *, days: int | None = None) -> Impact:
    """Counts by transition, the ten most frequent changed calls, and the users and agents affected."""
    batch = _Batch(doc)
    total = loosened = tightened = 0
    transitions: Counter[str] = Counter()
    users: Counter[str] = Counter()
    agents: Counter[str] = Counter()
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for record in records:
        total += 1
        after = batch.decide(record)
        before = record.action
        if after == before:
            continue
        transitions[transition(before, after)] += 1
        if SEVERITY.get(after, 2) < SEVERITY.get(before, 2):
            loosened += 1
        else:
            tightened += 1
        if record.user is not None:
            users[record.user] += 1
        if record.agent:
            agents[record.agent] += 1
        key = (str(record.tool), record.arguments_hash, before, after)
        counts[key] += 1
        ids = groups.setdefault(key, [])
        if len(ids) < 3:
            ids.append(record.call_id)
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_CALLS]
    return Impact(
        total=total, changed=sum(transitions.values()), transitions=dict(sorted(transitions.items())),
        loosened=loosened, tightened=tightened,
        top_calls=tuple(ChangedCall(tool, hash_, before, after, count, tuple(groups[(tool, hash_, before, after)]))
                        for (tool, hash_, before, after), count in top),
        users=dict(sorted(users.items())), agents=dict(sorted(agents.items())), days=days,
    )


def impact_between(records: Iterable[RecordedDecision], before: PolicyDoc, after: PolicyDoc, *,
                   days: int | None = None) -> Impact:
    """The impact of going from ``before`` to ``after`` alone: each call's "before" is what ``before``
    decides now, not its recorded verdict, so earlier changes to the live policy do not count."""
    baseline = _Batch(before)
    relabelled = [replace(record, action=baseline.decide(record)) for record in records]
    return impact_preview(relabelled, after, days=days)
