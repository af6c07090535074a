"""The provenance rules (issue 30, docs/provenance.md) through the real decision: the seeded defaults,
a provenance rule set that only tightens, Explain naming the conditions that fired."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import ApprovalRule
from approvals.rules import policy
from approvals.rules.policy import fired_provenance

pytestmark = pytest.mark.django_db

CLEAN: dict[str, Any] = {"tainted": False}
TAINTED = {"tainted": True, "read_only": False}
TAINTED_READ = {"tainted": True, "read_only": True}
SUSPECT_ARGUMENT = {"tainted": True, "argument_from_untrusted": True, "injection_suspected": True,
                    "argument_from_suspect": True, "read_only": False}


def decide(alice: Any, tool: str, provenance: dict[str, Any] | None, args: dict[str, Any] | None = None) -> Any:
    return policy.decide(tool=tool, args=args or {}, user_id=alice.pk, agent="troubleshooter", provenance=provenance)


def test_in_a_tainted_frame_a_call_the_rules_allow_needs_approval_unless_it_is_read_only(alice):
    ApprovalRule.objects.create(tool_pattern="notify_team", action="allow", priority=10)  # an operator's allow
    assert decide(alice, "notify_team", CLEAN).action == "allow"
    assert decide(alice, "notify_team", None).action == "allow"  # no provenance: an untainted call
    tainted = decide(alice, "notify_team", TAINTED)
    assert tainted.action == "require" and tainted.rule_set == "global:provenance"
    assert set(fired_provenance(tainted)) == {"tainted=true", "read_only=false"}
    assert decide(alice, "read_file", TAINTED_READ).action == "allow"  # reading stays free


def test_a_provenance_rule_never_widens_a_deny(alice):
    ApprovalRule.objects.create(tool_pattern="drop_table", action="deny", priority=10)
    assert decide(alice, "drop_table", TAINTED).action == "deny"
    assert decide(alice, "drop_table", SUSPECT_ARGUMENT).action == "deny"


def test_an_argument_from_a_suspect_result_needs_approval_even_for_a_read_only_tool(alice):
    decision = decide(alice, "read_file", {**SUSPECT_ARGUMENT, "read_only": True}, {"path": "x"})
    assert decision.action == "require"
    assert "argument_from_suspect=true" in fired_provenance(decision)


def test_once_a_suspected_injection_is_in_the_frame_even_a_read_needs_approval(alice):
    suspected_read = {"tainted": True, "injection_suspected": True, "read_only": True}
    decision = decide(alice, "read_file", suspected_read, {"path": "x"})
    assert decision.action == "require" and decision.rule_set == "global:provenance"
    assert fired_provenance(decision) == ["injection_suspected=true"]
    assert decide(alice, "read_file", TAINTED_READ, {"path": "x"}).action == "allow"


def test_an_operator_may_add_a_provenance_rule_of_their_own(alice):
    ApprovalRule.objects.create(tool_pattern="search_knowledge", arg_matchers={"$provenance.tainted": "true"},
                                action="deny", priority=10)
    assert decide(alice, "search_knowledge", CLEAN).action == "allow"
    assert decide(alice, "search_knowledge", TAINTED_READ).action == "deny"


def test_the_explain_api_takes_provenance_and_says_which_conditions_fired(api, alice, carol):
    response = api(carol).get("/api/approval/explain", {"tool": "write_file", "user": "alice",
                                                         "provenance": "argument_from_suspect"})
    body = response.json()
    assert response.status_code == 200 and body["decision"] == "require"
    assert set(body["provenance_fired"]) == {"tainted=true", "read_only=false", "argument_from_suspect=true"}
    refused = api(carol).get("/api/approval/explain", {"tool": "write_file", "user": "alice", "provenance": "evil"})
    assert refused.status_code == 400
