"""Rule sets from the database, the DB-backed decision (fail-closed) and the default rules."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction

from approvals.models import ApprovalRule, KnownTool, SecurityGroup
from approvals.rules import policy
from approvals.rules.seed import (
    CATCH_ALL_PRIORITY,
    DEFAULT_RULE_COUNT,
    DEFAULT_RULES,
    MCP_DEFAULT_RULES,
    PROVENANCE_DEFAULT_RULES,
    default_rules_ensure,
)
from approvals.rules.selectors import INTERFACE_TOOLS, rule_sets_for, tools_catalog
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.core import clock
from skald.models import Agent, AgentKind
from skald.tools.catalog import BUILTIN_TOOLS

pytestmark = pytest.mark.django_db


@pytest.fixture
def helper(db: None) -> Agent:
    return Agent.objects.create(name="helper", kind=AgentKind.TASK)


def group(name: str, *, users=(), agents=(), rules=()) -> SecurityGroup:
    made = SecurityGroup.objects.create(name=name)
    made.users.add(*users)
    made.agents.add(*agents)
    for pattern, action, priority, matchers in rules:
        ApprovalRule.objects.create(group=made, tool_pattern=pattern, action=action, priority=priority,
                                    arg_matchers=matchers)
    return made


def test_the_migration_seeds_the_default_rules_and_keeps_a_frozen_copy_of_them():
    migration = importlib.import_module("approvals.migrations.0002_default_rules")
    assert [tuple(rule) for rule in migration.DEFAULT_RULES] == list(DEFAULT_RULES)
    seeded = (ApprovalRule.objects.filter(group=None).exclude(tool_pattern="mcp__*")
              .exclude(note__in=[note for *_rest, note in PROVENANCE_DEFAULT_RULES]).order_by("id"))
    assert [(r.tool_pattern, r.action, r.priority, r.note) for r in seeded] == list(DEFAULT_RULES)
    mcp = importlib.import_module("approvals.migrations.0005_mcp_default_rules")
    assert [tuple(rule) for rule in mcp.MCP_DEFAULT_RULES] == list(MCP_DEFAULT_RULES)
    added = ApprovalRule.objects.filter(group=None, tool_pattern="mcp__*").order_by("id")
    assert [(r.tool_pattern, r.arg_matchers, r.action, r.priority, r.note) for r in added] == list(MCP_DEFAULT_RULES)
    assert seeded.get(tool_pattern="*").priority == CATCH_ALL_PRIORITY == 999_999
    provenance = importlib.import_module("approvals.migrations.0008_provenance_default_rules")
    suspect = importlib.import_module("approvals.migrations.0009_provenance_suspect_rule")
    assert [*(tuple(rule) for rule in provenance.PROVENANCE_DEFAULT_RULES), suspect.SUSPECT_RULE] == list(
        PROVENANCE_DEFAULT_RULES)
    added = ApprovalRule.objects.filter(group=None, note__in=[note for *_rest, note in PROVENANCE_DEFAULT_RULES])
    assert [(r.tool_pattern, r.arg_matchers, r.action, r.priority, r.note) for r in added.order_by("id")] == list(
        PROVENANCE_DEFAULT_RULES)


def test_defaults_are_recreated_only_when_the_table_is_empty():
    assert default_rules_ensure() == 0  # seeded by the migration
    ApprovalRule.objects.all().delete()
    assert default_rules_ensure() == DEFAULT_RULE_COUNT
    assert ApprovalRule.objects.count() == DEFAULT_RULE_COUNT
    event = AuditEvent.objects.get(kind=AuditKind.RULE_CHANGED)
    assert event.subject_id == "defaults"
    ApprovalRule.objects.exclude(tool_pattern="*").delete()
    assert default_rules_ensure() == 0  # an operator's (even sparse) configuration is left alone


DEFAULT_DECISIONS = [
    ("read_file", "allow"), ("search_knowledge", "allow"), ("scratchpad_set", "allow"), ("ask_human", "allow"),
    ("list_agents", "allow"), ("write_file", "require"), ("execute_cmd", "require"), ("execute_task", "require"),
    ("execute_subtask", "require"), ("some_plugin_tool", "require"), ("mcp__github__create_issue", "require"),
]


@pytest.mark.parametrize(("tool", "expected"), DEFAULT_DECISIONS)
def test_the_default_rules_allow_reads_and_require_everything_else(alice, tool, expected):
    decision = policy.decide(tool=tool, args={}, user_id=alice.pk, agent="troubleshooter")
    assert decision.action == expected and decision.rule is not None
    assert decision.rule_set == "global"


@pytest.mark.db_sensitive
def test_the_scope_selects_global_rules_and_every_group_of_the_user_or_agent(alice, bob, helper):
    group("zeta", users=[alice], agents=[helper], rules=[("*", "deny", 5, {})])  # both: listed once
    group("alpha", agents=[helper], rules=[("execute_*", "require", 1, {"argv.0": "rm"})])
    group("mid", users=[alice])  # no rules: an empty set
    group("other", users=[bob], rules=[("*", "allow", 1, {})])
    sets = rule_sets_for(user_id=alice.pk, agent="helper")
    # the global rules that read $provenance facts come last, as their own set (they only tighten)
    assert [s.name for s in sets] == ["global", "group:alpha", "group:mid", "group:zeta", "global:provenance"]
    assert len(sets[0].rules) + len(sets[-1].rules) == DEFAULT_RULE_COUNT
    assert len(sets[-1].rules) == len(PROVENANCE_DEFAULT_RULES)
    assert [s.name for s in rule_sets_for(user_id=alice.pk, agent=None)] == ["global", "group:mid", "group:zeta",
                                                                             "global:provenance"]
    assert [s.name for s in rule_sets_for(user_id=None, agent="helper")] == ["global", "group:alpha", "group:zeta",
                                                                             "global:provenance"]
    assert [s.name for s in rule_sets_for(user_id=None, agent=None)] == ["global", "global:provenance"]
    alpha_rule = sets[1].rules[0]
    assert (alpha_rule.group_name, alpha_rule.tool_pattern, alpha_rule.arg_matchers) == (
        "alpha", "execute_*", {"argv.0": "rm"})


@pytest.mark.db_sensitive
def test_rule_sets_are_read_in_two_queries_however_many_groups(alice, django_assert_num_queries):
    for i in range(12):
        group(f"g{i:02}", users=[alice], rules=[("*", "allow", j, {}) for j in range(3)])
    with django_assert_num_queries(2):
        sets = rule_sets_for(user_id=alice.pk, agent="troubleshooter")
    assert len(sets) == 14 and sum(len(s.rules) for s in sets) == DEFAULT_RULE_COUNT + 36


@pytest.mark.db_sensitive
def test_rules_are_ordered_by_priority_then_id_and_carry_their_ttl_in_seconds(alice):
    ApprovalRule.objects.all().delete()
    late = ApprovalRule.objects.create(tool_pattern="*", action="require", priority=5,
                                       approval_ttl=timedelta(minutes=30))
    early = ApprovalRule.objects.create(tool_pattern="*", action="require", priority=5)
    first = ApprovalRule.objects.create(tool_pattern="*", action="allow", priority=1, enabled=False)
    (global_set,) = rule_sets_for(user_id=alice.pk, agent=None)
    assert [r.id for r in global_set.rules] == [first.pk, late.pk, early.pk]
    assert global_set.rules[1].approval_ttl == 1800 and global_set.rules[2].approval_ttl is None
    decision = policy.decide(tool="x", args={}, user_id=alice.pk, agent=None)
    assert decision.rule.id == late.pk  # exact tie: the lower id decides


@pytest.mark.db_sensitive
def test_a_group_can_only_restrict(alice, helper):
    group("ops", agents=[helper], rules=[("execute_cmd", "deny", 1, {"argv.0": "rm"}),
                                         ("read_file", "allow", 1, {})])
    rm = policy.decide(tool="execute_cmd", args={"argv": ["rm", "-rf"]}, user_id=alice.pk, agent="helper")
    assert (rm.action, rm.rule_set, rm.rule.group_name) == ("deny", "group:ops", "ops")
    uptime = policy.decide(tool="execute_cmd", args={"argv": ["uptime"]}, user_id=alice.pk, agent="helper")
    assert (uptime.action, uptime.rule_set) == ("require", "global")
    # Another agent of the same user is not in the group.
    other = policy.decide(tool="execute_cmd", args={"argv": ["rm"]}, user_id=alice.pk, agent="troubleshooter")
    assert other.action == "require"


def test_no_scope_is_denied_without_reading_rules(django_assert_num_queries):
    with django_assert_num_queries(0):
        decision = policy.decide(tool="read_file", args={}, user_id=None, agent=None)
    assert (decision.action, decision.reason) == ("deny", "no scope")


def test_with_no_rules_every_call_is_denied(alice):
    ApprovalRule.objects.all().delete()
    for tool in ("read_file", "write_file", "anything"):
        decision = policy.decide(tool=tool, args={}, user_id=alice.pk, agent="troubleshooter")
        assert (decision.action, decision.rule, decision.reason) == ("deny", None, "no matching rule")


@pytest.mark.parametrize("change", [{"arg_matchers": ["argv.0"]}, {"arg_matchers": {"argv.0": 1}},
                                    {"action": "maybe"}], ids=["matchers a list", "glob a number", "bad action"])
def test_a_malformed_rule_in_the_database_denies_every_call(alice, change):
    ApprovalRule.objects.filter(tool_pattern="write_file").update(**change)
    decision = policy.decide(tool="read_file", args={}, user_id=alice.pk, agent=None)
    assert decision.action == "deny" and decision.reason.startswith("engine fault")


def test_a_database_error_denies(alice, monkeypatch):
    def broken(**_: object) -> list:
        raise DatabaseError("connection lost")

    monkeypatch.setattr(policy, "rule_sets_for", broken)
    decision = policy.decide(tool="read_file", args={}, user_id=alice.pk, agent=None)
    assert decision.action == "deny" and decision.rule is None
    assert decision.reason == "engine fault: rules unavailable: DatabaseError: connection lost"


@pytest.mark.db_sensitive
def test_a_failed_read_denies_and_leaves_the_callers_transaction_usable(alice, monkeypatch):
    def broken(**_: object) -> list:
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM approvals_no_such_table")
        return []

    monkeypatch.setattr(policy, "rule_sets_for", broken)
    with transaction.atomic():
        decision = policy.decide(tool="read_file", args={}, user_id=alice.pk, agent=None)
        assert decision.action == "deny" and decision.faulted
        assert ApprovalRule.objects.count() == DEFAULT_RULE_COUNT  # PostgreSQL: not an aborted transaction


@pytest.mark.db_sensitive
def test_the_tool_catalog_merges_and_deduplicates_in_one_query(django_assert_num_queries):
    now = clock.now()
    for name in ("read_file", "ask_human", "mcp_lookup"):
        KnownTool.objects.create(name=name, description=f"seen {name}", first_seen=now, last_seen=now)
    with django_assert_num_queries(1):
        tools = tools_catalog()
    names = [t["name"] for t in tools]
    assert len(names) == len(set(names))
    by_name = {t["name"]: t for t in tools}
    # A name is listed under the first category that knows it: registry, interface, dynamic.
    for name in BUILTIN_TOOLS.names():
        assert by_name[name]["category"] == "registry"
    for name, _ in INTERFACE_TOOLS:
        assert by_name[name]["category"] == ("registry" if name in BUILTIN_TOOLS else "interface")
    assert by_name["mcp_lookup"] == {"name": "mcp_lookup", "category": "dynamic", "description": "seen mcp_lookup"}
    assert {"write_file", "execute_cmd", "execute_task", "execute_subtask", "list_agents"} <= set(names)
