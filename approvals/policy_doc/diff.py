"""What applying a document would change, item by item, in apply order (pure).

Pairing: groups, MCP servers and tripwire patterns by name; rules within their set by what they are about (tool
and argument matchers), allow-list entries by pattern. Identical items are left alone; an item
whose key is in both is an update; the rest are creates and deletes. Several rules with one key
pair in canonical order, so a plan and the apply that follows it agree on every pairing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from approvals.policy_doc.document import (
    AgentDoc,
    AllowDoc,
    GroupDoc,
    McpServerDoc,
    PatternDoc,
    PolicyDoc,
    RuleDoc,
    SubscriptionDoc,
)

Op = Literal["create", "update", "delete"]
Subject = Literal["group", "rule", "agent", "mcp_server", "tripwire_pattern", "tripwire_allow", "subscription"]
RULE_FIELDS = ("action", "priority", "approval_ttl", "enabled", "note")
T = TypeVar("T", RuleDoc, AllowDoc, SubscriptionDoc)


@dataclass(frozen=True, slots=True)
class Change:
    """One create, update or delete. ``old`` is the live item (with its row id), ``new`` the proposed one."""

    op: Op
    subject: Subject
    group: str | None  # a rule's group (None: global); a group's own name
    old: Any = field(default=None, compare=False)
    new: Any = field(default=None, compare=False)
    fields: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """Where the proposed item is in the document ("" for a delete)."""
        return getattr(self.new, "path", "") if self.new is not None else ""

    @property
    def row_id(self) -> int | None:
        return getattr(self.old, "row_id", None) if self.old is not None else None

    def words(self) -> str:
        """The change as a sentence for a reviewer."""
        where = _where(self.group)
        verb = {"create": "Create", "update": "Change", "delete": "Delete"}[self.op]
        if self.subject == "rule":
            item = self.old if self.op != "create" else self.new
            text = f"{verb} {where} rule{_id(self.row_id)} {_rule_text(item)}"
            if self.op == "update":
                text += ": " + ", ".join(f"{name} {_show(getattr(self.old, name))} → {_show(getattr(self.new, name))}"
                                         for name in self.fields)
            return text + (f" ({self.path})" if self.path else "")
        if self.subject == "group":
            if self.op == "create":
                return (f"Create security group {self.group!r} ({len(self.new.users)} users, "
                        f"{len(self.new.agents)} agents, {len(self.new.rules)} rules) ({self.path})")
            if self.op == "delete":
                return f"Delete security group {self.group!r} with its {len(self.old.rules)} rules"
            return f"Change security group {self.group!r}: " + "; ".join(_member_changes(self.old, self.new)) \
                + f" ({self.path})"
        if self.subject == "agent":
            return f"Change agent {self.new.name!r}: " + "; ".join(_agent_changes(self.old, self.new)) \
                + f" ({self.path})"
        if self.subject == "mcp_server":
            server = self.new or self.old
            if self.op == "create":
                where = " ".join(server.argv) if server.transport == "stdio" else server.url
                return (f"Create MCP server {server.name!r} ({server.transport} {where}, {server.trust}, agents "
                        f"{', '.join(server.agents) or 'none'}, {'enabled' if server.enabled else 'disabled'}) "
                        f"({self.path})")
            if self.op == "delete":
                return f"Delete MCP server {server.name!r} and its pinned tools"
            return (f"Change MCP server {server.name!r}: "
                    + ", ".join(f"{name} {_show(_plain(getattr(self.old, name)))} → "
                                f"{_show(_plain(getattr(self.new, name)))}" for name in self.fields)
                    + f" ({self.path})")
        if self.subject == "subscription":
            item = self.new or self.old
            text = f"{verb} notification subscription{_id(self.row_id)} {item.name!r}"
            if self.op == "create":
                text += f" ({item.channel} {item.target}: {', '.join(item.events)})"
            if self.op == "update":
                text += ": " + ", ".join(self.fields)
            return text + (f" ({self.path})" if self.path else "")
        if self.subject == "tripwire_pattern":
            name = (self.new or self.old).name
            text = f"{verb} tripwire pattern org:{name}"
            if self.op == "update":
                text += ": " + ", ".join(self.fields)
            return text + (f" ({self.path})" if self.path else "")
        entry = self.new or self.old
        text = f"{verb} tripwire allow-list entry{_id(self.row_id)} {entry.regex!r}"
        if self.op == "update":
            text += ": " + ", ".join(self.fields)
        return text + (f" ({self.path})" if self.path else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op, "subject": self.subject, "group": self.group, "path": self.path or None,
            "id": self.row_id, "fields": list(self.fields),
            "before": _data(self.old), "after": _data(self.new), "words": self.words(),
        }


def policy_diff(live: PolicyDoc, proposed: PolicyDoc) -> list[Change]:
    """Every change that turns ``live`` into ``proposed``, in the order apply makes them."""
    group_changes: list[Change] = []
    group_deletes: list[Change] = []
    rule_changes: list[Change] = []
    live_groups = {g.name: g for g in live.groups}
    new_groups = {g.name: g for g in proposed.groups}
    for name, group in new_groups.items():
        old = live_groups.get(name)
        if old is None:
            group_changes.append(Change("create", "group", name, None, group))
        elif (old.description, old.users, old.agents) != (group.description, group.users, group.agents):
            changed = tuple(f for f in ("description", "users", "agents") if getattr(old, f) != getattr(group, f))
            group_changes.append(Change("update", "group", name, old, group, changed))
    for name, old in live_groups.items():
        if name not in new_groups:
            group_deletes.append(Change("delete", "group", name, old, None))
    live_sets: dict[str | None, tuple[RuleDoc, ...]] = {None: live.rules, **{g.name: g.rules for g in live.groups}}
    for group_name, rules in proposed.rule_sets():
        rule_changes += _rule_changes(group_name, live_sets.get(group_name, ()), rules)
    # A deleted group's rules go with it (security_group_delete records them in its audit row).
    rule_changes.sort(key=lambda c: {"delete": 0, "update": 1, "create": 2}[c.op])
    return [*group_changes, *rule_changes, *group_deletes, *_agent_updates(live.agents, proposed.agents),
            *_mcp_changes(live.mcp_servers, proposed.mcp_servers),
            *_pattern_changes(live.patterns, proposed.patterns), *_allow_changes(live.allow, proposed.allow),
            *_subscription_changes(live.subscriptions, proposed.subscriptions)]


SUBSCRIPTION_FIELDS = ("channel", "target", "events", "security_group", "agent", "case", "min_risk",
                       "escalate_after_minutes", "chain_order", "enabled")


def _subscription_changes(live: Sequence[SubscriptionDoc], new: Sequence[SubscriptionDoc]) -> list[Change]:
    updates, creates, deletes = _pair(live, new, lambda s: s.key)
    return [
        *(Change("delete", "subscription", None, old, None) for old in deletes),
        *(Change("update", "subscription", None, old, item,
                 tuple(f for f in SUBSCRIPTION_FIELDS if getattr(old, f) != getattr(item, f)))
          for old, item in updates),
        *(Change("create", "subscription", None, None, item) for item in creates),
    ]


MCP_FIELDS = ("transport", "argv", "url", "secrets", "trust", "agents", "enabled")


def _mcp_changes(live: Sequence[McpServerDoc], new: Sequence[McpServerDoc]) -> list[Change]:
    old_by_name = {m.name: m for m in live}
    new_names = {m.name for m in new}
    changes = [Change("delete", "mcp_server", None, m, None) for m in live if m.name not in new_names]
    for server in new:
        old = old_by_name.get(server.name)
        if old is None:
            changes.append(Change("create", "mcp_server", None, None, server))
        elif old != server:
            changes.append(Change("update", "mcp_server", None, old, server,
                                  tuple(f for f in MCP_FIELDS if getattr(old, f) != getattr(server, f))))
    return changes


def _plain(value: Any) -> Any:
    """A tuple field as a reviewer reads it: argv and agents joined, secrets as their names."""
    if isinstance(value, tuple):
        return " ".join(f"{item[0]}" if isinstance(item, tuple) else str(item) for item in value) or "none"
    return value


AGENT_FIELDS = ("tools", "bounds", "exec_allowlist")


def _agent_updates(live: Sequence[AgentDoc], new: Sequence[AgentDoc]) -> list[Change]:
    """Agents are only ever updated: the document cannot create or delete one (see ``members``)."""
    old_by_name = {a.name: a for a in live}
    return [Change("update", "agent", None, old, agent, tuple(f for f in AGENT_FIELDS
                                                            if getattr(old, f) != getattr(agent, f)))
            for agent in new if (old := old_by_name.get(agent.name)) is not None and old != agent]


def _agent_changes(old: AgentDoc, new: AgentDoc) -> list[str]:
    parts: list[str] = []
    if old.tools != new.tools:
        added = [f"+{t}" for t in new.tools if t not in old.tools]
        removed = [f"-{t}" for t in old.tools if t not in new.tools]
        parts.append("tools " + (" ".join(added + removed) or "reordered"))
    if old.bounds != new.bounds:
        before, after = dict(old.bounds), dict(new.bounds)
        shown = [f"{k} {_bound(before, k)} → {_bound(after, k)}" for k in sorted(set(before) | set(after))
                 if _bound(before, k) != _bound(after, k)]
        parts.append("bounds " + ", ".join(shown))
    if old.exec_allowlist != new.exec_allowlist:
        parts.append("exec allow-list " + ("the parent's" if new.exec_allowlist is None
                                           else ", ".join(new.exec_allowlist) or "nothing"))
    return parts


def _pair(live: Sequence[T], new: Sequence[T], key: Callable[[T], Hashable]
          ) -> tuple[list[tuple[T, T]], list[T], list[T]]:
    """(updates as (old, new), creates, deletes); identical items are dropped."""
    left = list(live)
    unmatched: list[T] = []
    for item in new:
        same = next((i for i, old in enumerate(left) if old == item), None)
        if same is None:
            unmatched.append(item)
        else:
            left.pop(same)
    updates: list[tuple[T, T]] = []
    creates: list[T] = []
    for item in unmatched:
        index = next((i for i, old in enumerate(left) if key(old) == key(item)), None)
        if index is None:
            creates.append(item)
        else:
            updates.append((left.pop(index), item))
    return updates, creates, left


def _rule_changes(group: str | None, live: Sequence[RuleDoc], new: Sequence[RuleDoc]) -> list[Change]:
    updates, creates, deletes = _pair(live, new, lambda r: r.key)
    return [
        *(Change("delete", "rule", group, old, None) for old in deletes),
        *(Change("update", "rule", group, old, item, tuple(f for f in RULE_FIELDS
                                                          if getattr(old, f) != getattr(item, f)))
          for old, item in updates),
        *(Change("create", "rule", group, None, item) for item in creates),
    ]


def _pattern_changes(live: Sequence[PatternDoc], new: Sequence[PatternDoc]) -> list[Change]:
    old_by_name = {p.name: p for p in live}
    new_names = {p.name for p in new}
    changes = [Change("delete", "tripwire_pattern", None, p, None) for p in live if p.name not in new_names]
    for pattern in new:
        old = old_by_name.get(pattern.name)
        if old is None:
            changes.append(Change("create", "tripwire_pattern", None, None, pattern))
        elif old != pattern:
            changes.append(Change("update", "tripwire_pattern", None, old, pattern,
                                  tuple(f for f in ("regex", "keywords", "enabled", "note")
                                        if getattr(old, f) != getattr(pattern, f))))
    return changes


def _allow_changes(live: Sequence[AllowDoc], new: Sequence[AllowDoc]) -> list[Change]:
    updates, creates, deletes = _pair(live, new, lambda a: a.key)
    return [
        *(Change("delete", "tripwire_allow", None, old, None) for old in deletes),
        *(Change("update", "tripwire_allow", None, old, item,
                 tuple(f for f in ("reason", "enabled") if getattr(old, f) != getattr(item, f)))
          for old, item in updates),
        *(Change("create", "tripwire_allow", None, None, item) for item in creates),
    ]


def _member_changes(old: GroupDoc, new: GroupDoc) -> list[str]:
    parts: list[str] = []
    for name in ("users", "agents"):
        before, after = set(getattr(old, name)), set(getattr(new, name))
        added = [f"+{n}" for n in sorted(after - before)]
        removed = [f"-{n}" for n in sorted(before - after)]
        if added or removed:
            parts.append(f"{name} " + " ".join(added + removed))
    if old.description != new.description:
        parts.append("description")
    return parts


def _bound(bounds: dict[str, Any], name: str) -> str:
    return _show(bounds[name]) if name in bounds else "default"


def _where(group: str | None) -> str:
    return "global" if group is None else f"group {group!r}"


def _id(row_id: int | None) -> str:
    return f" #{row_id}" if row_id is not None else ""


def _rule_text(rule: RuleDoc) -> str:
    args = (" where " + ", ".join(f"{k}={v!r}" for k, v in rule.args)) if rule.args else ""
    return f"{rule.action} {rule.tool!r}{args} @{rule.priority}"


def _show(value: Any) -> str:
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value).lower() \
        if isinstance(value, bool) else str(value)


def _data(item: Any) -> Any:
    if item is None:
        return None
    data = item.as_data()
    if isinstance(item, GroupDoc):
        data.pop("rules", None)
    return data
