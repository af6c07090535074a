"""Apply a document: one transaction, through the services the admin uses, one audit row naming
the document's digest.

Every item's write is its own service (``approval_rule_save``, ``security_group_save``,
``agent_save``, ``mcp_server_create`` / ``mcp_server_update``, ``subscription_create`` …,
``tripwire_pattern_save`` …), so validation and
per-item audit rows are exactly the admin's; they nest in this transaction, and anything refused rolls
the whole document back. (An MCP server the document enables is connected to and its tools are pinned
as an admin's enabling does; a server that cannot be reached refuses the whole document.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction

from approvals.models import ApprovalRule, SecurityGroup, TripwireAllowEntry, TripwirePattern
from approvals.policy_doc.diff import Change, policy_diff
from approvals.policy_doc.document import (
    AgentDoc,
    AllowDoc,
    GroupDoc,
    McpServerDoc,
    PatternDoc,
    PolicyDoc,
    RuleDoc,
    SubscriptionDoc,
    digest,
)
from approvals.policy_doc.live import policy_live
from approvals.policy_doc.members import members_resolve
from approvals.policy_doc.parse import PolicyInvalid, Problem
from approvals.rules.services import (
    approval_rule_delete,
    approval_rule_save,
    security_group_delete,
    security_group_save,
)
from approvals.tripwires.services import (
    tripwire_allow_delete,
    tripwire_allow_save,
    tripwire_pattern_delete,
    tripwire_pattern_save,
)
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.agents.services import agent_save
from skald.core.errors import SkaldError
from skald.mcp.models import McpServer
from skald.mcp.services import mcp_server_create, mcp_server_delete, mcp_server_update
from skald.models import Agent
from skald.notifications.models import Subscription
from skald.notifications.services import subscription_create, subscription_delete, subscription_update

# pg_advisory_xact_lock key: "policy" in ASCII. Two applies serialise on it, so the second reads the
# first's result before it compares digests (SQLite serialises every write transaction anyway).
POLICY_LOCK_KEY = 0x706F6C696379


class PolicyChanged(SkaldError):
    """The live policy is not the one the plan was made against."""

    code = "policy_changed"
    http_status = 409


@dataclass(frozen=True, slots=True)
class Applied:
    digest: str
    previous_digest: str
    changes: tuple[Change, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "previous_digest": self.previous_digest,
                "changes": [change.as_dict() for change in self.changes]}


def policy_apply(*, actor: Actor, doc: PolicyDoc, expect_digest: str | None = None) -> Applied:
    """Make the live configuration ``doc``, all or nothing, and audit POLICY_APPLIED with its digest.

    Raises:
        PolicyChanged: ``policy_changed`` (409) when ``expect_digest`` is given and the live policy's
            digest is another.
        PolicyInvalid: ``policy_invalid`` (400), each problem by its path in the document (an unknown
            member, or anything a service refuses).
    """
    with transaction.atomic(durable=True):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [POLICY_LOCK_KEY])
        live = policy_live()
        previous = digest(live)
        if expect_digest is not None and expect_digest != previous:
            raise PolicyChanged("The live policy changed since the plan: plan again and review the changes.",
                                expected=expect_digest, live_digest=previous)
        users, agents, problems = members_resolve(doc)
        if problems:
            raise PolicyInvalid(problems)
        changes = tuple(policy_diff(live, doc))
        writer = _Writer(actor, users, agents)
        for change in changes:
            try:
                writer.write(change)
            except SkaldError as exc:
                if isinstance(exc, PolicyInvalid):
                    raise
                fields = exc.extra.get("fields") or {}
                detail = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in fields.items()) or exc.message
                field = exc.extra.get("field")  # the MCP services name the one field they refuse
                where = f"{change.path}.{field}" if change.path and isinstance(field, str) else change.path or "$"
                raise PolicyInvalid([Problem(where, exc.code, detail)]) from exc
        document_digest = digest(doc)
        counts = Counter(f"{change.subject}.{change.op}" for change in changes)
        audit_append(actor=actor, kind=AuditKind.POLICY_APPLIED, subject_type="policy", subject_id=document_digest,
                     payload={"digest": document_digest, "previous_digest": previous, "changes": len(changes),
                              "by_kind": dict(sorted(counts.items()))})
    return Applied(digest=document_digest, previous_digest=previous, changes=changes)


class _Writer:
    """One change at a time, each through its service."""

    def __init__(self, actor: Actor, users: dict[str, Any], agents: dict[str, Any]) -> None:
        self.actor = actor
        self.users = users
        self.agents = agents
        self.groups: dict[str, SecurityGroup] = {g.name: g for g in SecurityGroup.objects.all()}

    def write(self, change: Change) -> None:
        match change.subject:
            case "group":
                self._group(change)
            case "rule":
                self._rule(change)
            case "agent":
                self._agent(change)
            case "mcp_server":
                self._mcp_server(change)
            case "subscription":
                self._subscription(change)
            case "tripwire_pattern":
                self._pattern(change)
            case "tripwire_allow":
                self._allow(change)

    def _group(self, change: Change) -> None:
        if change.op == "delete":
            security_group_delete(actor=self.actor, group=self.groups.pop(change.old.name))
            return
        new: GroupDoc = change.new
        group = self.groups.get(new.name) or SecurityGroup(name=new.name)
        group.description = new.description
        security_group_save(actor=self.actor, group=group,
                            changed=["created"] if change.op == "create" else list(change.fields),
                            users=[self.users[name] for name in new.users],
                            agents=[self.agents[name] for name in new.agents])
        self.groups[new.name] = group

    def _rule(self, change: Change) -> None:
        if change.op == "delete":
            approval_rule_delete(actor=self.actor, rule=ApprovalRule.objects.select_related("group").get(
                pk=change.old.row_id))
            return
        new: RuleDoc = change.new
        if change.op == "update":
            rule = ApprovalRule.objects.select_related("group").get(pk=change.old.row_id)
        else:
            rule = ApprovalRule(group=self.groups[change.group] if change.group is not None else None,
                                tool_pattern=new.tool, arg_matchers=dict(new.args))
        rule.action = new.action
        rule.priority = new.priority
        rule.approval_ttl = timedelta(seconds=new.approval_ttl) if new.approval_ttl is not None else None
        rule.enabled = new.enabled
        rule.note = new.note
        approval_rule_save(actor=self.actor, rule=rule,
                           changed=["created"] if change.op == "create" else list(change.fields))

    def _agent(self, change: Change) -> None:
        new: AgentDoc = change.new
        agent = Agent.objects.get(pk=change.old.row_id)
        agent.allowed_tools = list(new.tools)
        agent.bounds = dict(new.bounds)
        agent.exec_allowlist = None if new.exec_allowlist is None else list(new.exec_allowlist)
        fields = {"tools": "allowed_tools", "bounds": "bounds", "exec_allowlist": "exec_allowlist"}
        agent_save(actor=self.actor, agent=agent, changed=[fields[name] for name in change.fields])

    def _mcp_server(self, change: Change) -> None:
        if change.op == "delete":
            mcp_server_delete(actor=self.actor, server=McpServer.objects.get(pk=change.old.row_id))
            return
        new: McpServerDoc = change.new
        if change.op == "create":
            mcp_server_create(actor=self.actor, data=new.service_input())
        else:
            mcp_server_update(actor=self.actor, server=McpServer.objects.get(pk=change.old.row_id),
                              data=new.service_input())

    def _subscription(self, change: Change) -> None:
        if change.op == "delete":
            subscription_delete(actor=self.actor, subscription=Subscription.objects.get(pk=change.old.row_id))
            return
        new: SubscriptionDoc = change.new
        if change.op == "create":
            subscription_create(actor=self.actor, owner=None, data=new.service_input())
        else:
            subscription_update(actor=self.actor, subscription=Subscription.objects.get(pk=change.old.row_id),
                                data=new.service_input())

    def _pattern(self, change: Change) -> None:
        if change.op == "delete":
            tripwire_pattern_delete(actor=self.actor, pattern=TripwirePattern.objects.get(pk=change.old.row_id))
            return
        new: PatternDoc = change.new
        pattern = (TripwirePattern.objects.get(pk=change.old.row_id) if change.op == "update"
                   else TripwirePattern(name=new.name))
        pattern.regex, pattern.keywords, pattern.enabled, pattern.note = new.regex, new.keywords, new.enabled, new.note
        tripwire_pattern_save(actor=self.actor, pattern=pattern,
                              changed=["created"] if change.op == "create" else list(change.fields))

    def _allow(self, change: Change) -> None:
        if change.op == "delete":
            tripwire_allow_delete(actor=self.actor, entry=TripwireAllowEntry.objects.get(pk=change.old.row_id))
            return
        new: AllowDoc = change.new
        entry = (TripwireAllowEntry.objects.get(pk=change.old.row_id) if change.op == "update"
                 else TripwireAllowEntry(regex=new.regex))
        entry.reason, entry.enabled = new.reason, new.enabled
        tripwire_allow_save(actor=self.actor, entry=entry,
                            changed=["created"] if change.op == "create" else list(change.fields))
