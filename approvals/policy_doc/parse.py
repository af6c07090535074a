"""Raw YAML → :class:`PolicyDoc`, every problem named by its path in the document (pure).

The checks are the JSON Schema's (``schema.json``) plus the services' own (a rule the engine could
not evaluate, a regular expression the tripwire detector would refuse), so a document that parses
here is one the services will take. Members (usernames, agent names) are checked against the
database by :mod:`approvals.policy_doc.apply` and :mod:`approvals.policy_doc.plan`, also by path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from approvals.policy_doc.document import (
    VERSION,
    AgentDoc,
    AllowDoc,
    GroupDoc,
    McpServerDoc,
    PatternDoc,
    PolicyDoc,
    RuleDoc,
    SubscriptionDoc,
    policy_doc,
)
from approvals.rules.services import approval_rule_problems
from approvals.tripwires.services import tripwire_allow_problems, tripwire_pattern_problems
from loop.bounds import Bounds
from loop.errors import HarnessError
from skald.core.errors import SkaldError
from skald.notifications.events import EventKind

MAX_PRIORITY = 2_147_483_647  # the column is a PositiveIntegerField


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a document: where (``groups[1].rules[0].priority``), a stable code, why."""

    path: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "message": self.message}


class PolicyInvalid(SkaldError):
    """A document that cannot be applied; ``extra["problems"]`` lists each by its path."""

    code = "policy_invalid"
    http_status = 400

    def __init__(self, problems: list[Problem]) -> None:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"The policy document is not valid: {first.path}: {first.message}{more}",
                         problems=[p.as_dict() for p in problems])
        self.problems = problems


def load_text(text: str) -> Any:
    """YAML text → plain data; a syntax error is a ``policy_invalid`` naming the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "$"
        raise PolicyInvalid([Problem(where, "yaml_syntax", str(exc).splitlines()[0])]) from None


class _Reader:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, code: str, message: str) -> None:
        self.problems.append(Problem(path, code, message))

    def mapping(self, value: Any, path: str, *, required: tuple[str, ...], optional: tuple[str, ...]
                ) -> Mapping[str, Any] | None:
        if not isinstance(value, Mapping):
            self.add(path, "type", f"Expected a mapping, got {_type(value)}.")
            return None
        for key in value:
            if key not in required and key not in optional:
                self.add(_join(path, str(key)), "unknown_field",
                         f"Unknown field; expected one of {', '.join((*required, *optional))}.")
        for key in required:
            if key not in value:
                self.add(_join(path, key), "required", "This field is required.")
        return value

    def items(self, value: Any, path: str) -> list[tuple[str, Any]]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, "type", f"Expected a list, got {_type(value)}.")
            return []
        return [(f"{path}[{index}]", item) for index, item in enumerate(value)]

    def string(self, data: Mapping[str, Any], key: str, path: str, default: str = "", *, max_length: int) -> str:
        value = data.get(key, default)
        if value is None:
            value = default
        if not isinstance(value, str):
            self.add(_join(path, key), "type", f"Expected a string, got {_type(value)}.")
            return default
        if len(value) > max_length:
            self.add(_join(path, key), "too_long", f"At most {max_length} characters.")
        return value

    def boolean(self, data: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            self.add(_join(path, key), "type", f"Expected true or false, got {_type(value)}.")
            return default
        return value

    def names(self, data: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        found: list[str] = []
        for item_path, item in self.items(data.get(key), _join(path, key)):
            if not isinstance(item, str) or not item:
                self.add(item_path, "type", f"Expected a name, got {_type(item)}.")
            elif item in found:
                self.add(item_path, "duplicate", f"{item!r} is listed twice.")
            else:
                found.append(item)
        return tuple(found)


def parse(data: Any) -> PolicyDoc:
    """Plain data (from YAML or JSON) → a canonical document.

    Raises:
        PolicyInvalid: ``policy_invalid`` (400), every problem with its path.
    """
    reader = _Reader()
    top = reader.mapping(data, "$", required=("version",), optional=("rules", "groups", "agents", "mcp_servers",
                                                                   "tripwires", "notifications"))
    if top is None:
        raise PolicyInvalid(reader.problems)
    if "version" in top and top["version"] != VERSION:
        reader.add("version", "unsupported_version", f"This Skald reads version {VERSION} documents.")
    rules = [_rule(reader, item, path) for path, item in reader.items(top.get("rules"), "rules")]
    groups = _named(reader, top.get("groups"), "groups", _group, "A group")
    agents = _named(reader, top.get("agents"), "agents", _agent, "The agent")
    servers = _named(reader, top.get("mcp_servers"), "mcp_servers", _mcp_server, "An MCP server")
    patterns: list[PatternDoc] = []
    allow: list[AllowDoc] = []
    tripwires = top.get("tripwires")
    if tripwires is not None:
        trip = reader.mapping(tripwires, "tripwires", required=(), optional=("patterns", "allow"))
        if trip is not None:
            patterns = _named(reader, trip.get("patterns"), "tripwires.patterns", _pattern, "A pattern")
            allow = [a for path, item in reader.items(trip.get("allow"), "tripwires.allow")
                     if (a := _allow(reader, item, path)) is not None]
    subscriptions = _named(reader, top.get("notifications"), "notifications", _subscription, "A subscription")
    if reader.problems:
        raise PolicyInvalid(reader.problems)
    return policy_doc(rules=[r for r in rules if r is not None], groups=groups, patterns=patterns, allow=allow,
                      agents=agents, mcp_servers=servers, subscriptions=subscriptions)


Named = TypeVar("Named", GroupDoc, AgentDoc, McpServerDoc, PatternDoc, SubscriptionDoc)


def _named(reader: _Reader, value: Any, path: str, read: Callable[[_Reader, Any, str], Named | None],
           noun: str) -> list[Named]:
    """A list of entries identified by their name: each read by ``read``, a second use of a name refused."""
    found: list[Named] = []
    for item_path, item in reader.items(value, path):
        entry = read(reader, item, item_path)
        if entry is None:
            continue
        if any(other.name == entry.name for other in found):
            reader.add(f"{item_path}.name", "duplicate", f"{noun} named {entry.name!r} is already defined.")
        found.append(entry)
    return found


def _rule(reader: _Reader, item: Any, path: str) -> RuleDoc | None:
    data = reader.mapping(item, path, required=("tool", "action", "priority"),
                          optional=("args", "approval_ttl", "enabled", "note"))
    if data is None:
        return None
    before = len(reader.problems)
    tool = reader.string(data, "tool", path, max_length=128).strip()
    action = data.get("action")
    priority = data.get("priority", 0)
    args = data.get("args") or {}
    ttl = data.get("approval_ttl")
    # 0 is what an admin-entered zero duration exports as; the gate then waits its default.
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0):
        reader.add(f"{path}.approval_ttl", "invalid", "Expected a whole number of seconds ≥ 0, or nothing.")
    if isinstance(priority, int) and not isinstance(priority, bool) and priority > MAX_PRIORITY:
        reader.add(f"{path}.priority", "invalid", f"Priority must be at most {MAX_PRIORITY}.")
    problems = approval_rule_problems(tool_pattern=tool if "tool" in data else "", arg_matchers=args,
                                      priority=priority, action=action if "action" in data else None)
    field_names = {"tool_pattern": "tool", "arg_matchers": "args"}
    for field_name, messages in problems.items():
        name = field_names.get(field_name, field_name)
        if name in ("tool", "action", "priority") and name not in data:
            continue  # already reported as required
        for message in messages:
            reader.add(f"{path}.{name}", "invalid", message)
    enabled = reader.boolean(data, "enabled", path, True)
    note = reader.string(data, "note", path, max_length=200)
    if len(reader.problems) > before:
        return None
    return RuleDoc(tool=tool, action=str(action), priority=int(priority),
                   args=tuple(sorted((str(k), str(v)) for k, v in args.items())),
                   approval_ttl=ttl, enabled=enabled, note=note, path=path)


def _group(reader: _Reader, item: Any, path: str) -> GroupDoc | None:
    data = reader.mapping(item, path, required=("name",), optional=("description", "users", "agents", "rules"))
    if data is None:
        return None
    before = len(reader.problems)
    name = reader.string(data, "name", path, max_length=80).strip()
    if "name" in data and not name:
        reader.add(f"{path}.name", "invalid", "A group needs a name.")
    description = reader.string(data, "description", path, max_length=10_000)
    users = reader.names(data, "users", path)
    agents = reader.names(data, "agents", path)
    rules = [_rule(reader, rule, rule_path) for rule_path, rule in reader.items(data.get("rules"), f"{path}.rules")]
    if len(reader.problems) > before:
        return None
    return GroupDoc(name=name, description=description, users=users, agents=agents,
                    rules=tuple(r for r in rules if r is not None), path=path)


def _agent(reader: _Reader, item: Any, path: str) -> AgentDoc | None:
    data = reader.mapping(item, path, required=("name",), optional=("tools", "bounds", "exec_allowlist"))
    if data is None:
        return None
    before = len(reader.problems)
    name = reader.string(data, "name", path, max_length=64)
    tools = _strings(reader, data.get("tools"), f"{path}.tools")
    bounds = data.get("bounds") or {}
    if not isinstance(bounds, Mapping):
        reader.add(f"{path}.bounds", "type", f"Expected a mapping, got {_type(bounds)}.")
    else:
        try:
            Bounds().override(bounds)  # what the agent service checks
        except HarnessError as exc:
            reader.add(f"{path}.bounds", "invalid", f"{exc}.")
    allowlist = data.get("exec_allowlist")
    programs = None if allowlist is None else _strings(reader, allowlist, f"{path}.exec_allowlist")
    if len(reader.problems) > before:
        return None
    return AgentDoc(name=name, tools=tools, bounds=tuple(sorted(dict(bounds).items())), exec_allowlist=programs,
                    path=path)


MCP_TRANSPORTS = ("stdio", "http")
MCP_TRUST = ("untrusted", "trusted")


def _mcp_server(reader: _Reader, item: Any, path: str) -> McpServerDoc | None:
    """The shape of an MCP server entry. What depends on the deployment (the stdio allowlist, the SSRF
    screen of the URL, the secret files) is checked by the MCP services when the server is created or
    changed, as at an admin's save; a problem then names this entry's path."""
    data = reader.mapping(item, path, required=("name", "transport"),
                          optional=("argv", "url", "secret_env", "secret_headers", "trust", "agents", "enabled"))
    if data is None:
        return None
    before = len(reader.problems)
    name = reader.string(data, "name", path, max_length=40)
    if name and not _slug(name):
        reader.add(f"{path}.name", "invalid", "Letters, digits, '-' and '_' only (tools are named mcp__<name>__…).")
    transport = reader.string(data, "transport", path, max_length=8)
    if "transport" in data and transport not in MCP_TRANSPORTS:
        reader.add(f"{path}.transport", "invalid", "Expected stdio or http.")
    own, other = ("argv", "url") if transport == "stdio" else ("url", "argv")
    secrets_key, other_secrets = ("secret_env", "secret_headers") if transport == "stdio" else (
        "secret_headers", "secret_env")
    for key in (other, other_secrets):
        if key in data:
            reader.add(f"{path}.{key}", "invalid", f"A {transport or 'server'} server has no {key}.")
    if own not in data and transport in MCP_TRANSPORTS:
        reader.add(f"{path}.{own}", "required", f"A {transport} server needs its {own}.")
    argv = _strings(reader, data.get("argv"), f"{path}.argv") if transport == "stdio" else ()
    url = reader.string(data, "url", path, max_length=500) if transport == "http" else ""
    secrets = data.get(secrets_key) or {}
    if not isinstance(secrets, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in secrets.items()):
        reader.add(f"{path}.{secrets_key}", "type", "Expected a mapping of names to secret file paths.")
        secrets = {}
    trust = reader.string(data, "trust", path, "untrusted", max_length=10)
    if trust not in MCP_TRUST:
        reader.add(f"{path}.trust", "invalid", "Expected untrusted or trusted.")
    agents = reader.names(data, "agents", path)
    enabled = reader.boolean(data, "enabled", path, False)
    if len(reader.problems) > before:
        return None
    return McpServerDoc(name=name, transport=transport, argv=argv, url=url,
                        secrets=tuple(sorted(secrets.items())), trust=trust, agents=tuple(sorted(agents)),
                        enabled=enabled, path=path)


ORG_CHANNELS = ("webhook", "email", "slack", "teams")  # "user_email" is a person's own, not the organisation's
RISKS = ("low", "medium", "high")


def _subscription(reader: _Reader, item: Any, path: str) -> SubscriptionDoc | None:
    """The shape of an organisation subscription. The receiver's URL is screened (SSRF, allowed CIDRs)
    by the notification services when the subscription is created or changed, as at an admin's save."""
    data = reader.mapping(item, path, required=("name", "channel", "target", "events"),
                          optional=("security_group", "agent", "case", "min_risk", "escalate_after_minutes",
                                    "chain_order", "enabled"))
    if data is None:
        return None
    before = len(reader.problems)
    name = reader.string(data, "name", path, max_length=80).strip()
    if "name" in data and not name:
        reader.add(f"{path}.name", "invalid", "A subscription needs a name.")
    channel = reader.string(data, "channel", path, max_length=12)
    if "channel" in data and channel not in ORG_CHANNELS:
        reader.add(f"{path}.channel", "invalid", f"Expected one of {', '.join(ORG_CHANNELS)}.")
    target = reader.string(data, "target", path, max_length=500)
    known = {str(kind) for kind in EventKind}
    events = reader.names(data, "events", path)
    for index, event in enumerate(events):
        if event not in known:
            reader.add(f"{path}.events[{index}]", "invalid",
                       f"Unknown event; expected one of {', '.join(sorted(known))}.")
    if "events" in data and not events:
        reader.add(f"{path}.events", "invalid", "A subscription needs at least one event.")
    filters = {key: reader.string(data, key, path, max_length=80 if key == "security_group" else 64)
               for key in ("security_group", "agent", "case")}
    risk = reader.string(data, "min_risk", path, "low", max_length=8)
    if risk not in RISKS:
        reader.add(f"{path}.min_risk", "invalid", "Expected low, medium or high.")
    after = data.get("escalate_after_minutes")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 1):
        reader.add(f"{path}.escalate_after_minutes", "invalid", "Expected a whole number of minutes ≥ 1, or nothing.")
    order = data.get("chain_order", 0)
    if isinstance(order, bool) or not isinstance(order, int) or not 0 <= order <= 32767:
        reader.add(f"{path}.chain_order", "invalid", "Expected a whole number from 0 to 32767.")
    enabled = reader.boolean(data, "enabled", path, True)
    if len(reader.problems) > before:
        return None
    return SubscriptionDoc(name=name, channel=channel, target=target, events=tuple(sorted(events)),
                           security_group=filters["security_group"], agent=filters["agent"], case=filters["case"],
                           min_risk=risk, escalate_after_minutes=after, chain_order=order, enabled=enabled, path=path)


def _strings(reader: _Reader, value: Any, path: str) -> tuple[str, ...]:
    found: list[str] = []
    for item_path, item in reader.items(value, path):
        if isinstance(item, str) and item:
            found.append(item)
        else:
            reader.add(item_path, "type", f"Expected a name, got {_type(item)}.")
    return tuple(found)


def _pattern(reader: _Reader, item: Any, path: str) -> PatternDoc | None:
    data = reader.mapping(item, path, required=("name", "regex"), optional=("keywords", "enabled", "note"))
    if data is None:
        return None
    before = len(reader.problems)
    name = reader.string(data, "name", path, max_length=60)
    regex = reader.string(data, "regex", path, max_length=500)
    keywords = reader.string(data, "keywords", path, max_length=200)
    enabled = reader.boolean(data, "enabled", path, True)
    note = reader.string(data, "note", path, max_length=200)
    if len(reader.problems) == before:
        for field_name, messages in tripwire_pattern_problems(name=name, regex=regex, keywords=keywords).items():
            for message in messages:
                reader.add(f"{path}.{field_name}", "invalid", message)
        if name and not _slug(name):
            reader.add(f"{path}.name", "invalid", "Letters, digits, '-' and '_' only (refusals name org:<name>).")
    if len(reader.problems) > before:
        return None
    return PatternDoc(name=name, regex=regex, keywords=keywords, enabled=enabled, note=note, path=path)


def _allow(reader: _Reader, item: Any, path: str) -> AllowDoc | None:
    data = reader.mapping(item, path, required=("regex", "reason"), optional=("enabled",))
    if data is None:
        return None
    before = len(reader.problems)
    regex = reader.string(data, "regex", path, max_length=500)
    reason = reader.string(data, "reason", path, max_length=300)
    enabled = reader.boolean(data, "enabled", path, True)
    if len(reader.problems) == before:
        for field_name, messages in tripwire_allow_problems(regex=regex, reason=reason).items():
            for message in messages:
                reader.add(f"{path}.{field_name}", "invalid", message)
    if len(reader.problems) > before:
        return None
    return AllowDoc(regex=regex, reason=reason, enabled=enabled, path=path)


def _slug(name: str) -> bool:
    return name.isascii() and all(ch.isalnum() or ch in "-_" for ch in name)


def _join(path: str, key: str) -> str:
    return key if path == "$" else f"{path}.{key}"


def _type(value: Any) -> str:
    return {type(None): "nothing", bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)
