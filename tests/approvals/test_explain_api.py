"""``GET /api/approval/explain`` and ``GET /api/approval/tools`` (SPEC A1, A5)."""

from __future__ import annotations

import json

import pytest

from approvals.models import ApprovalRule, KnownTool, SecurityGroup
from approvals.rules.seed import DEFAULT_RULE_COUNT
from skald.agents.seed import seed_agents
from skald.core import clock
from skald.models import Agent, AgentKind

pytestmark = pytest.mark.django_db
EXPLAIN = "/api/approval/explain"
TOOLS = "/api/approval/tools"


def explain(client, tool: str, args: object = None, **scope: str):
    params = {"tool": tool, **scope}
    if args is not None:
        params["args"] = args if isinstance(args, str) else json.dumps(args)
    return client.get(EXPLAIN, params)


@pytest.fixture
def troubleshooter(db: None) -> None:
    seed_agents()


def test_explain_names_the_rule_that_decided_and_lists_every_rule_considered(api, alice, troubleshooter):
    response = explain(api(alice), "read_file", {"path": "notes.md"}, user="alice", agent="troubleshooter")
    assert response.status_code == 200
    body = response.json()
    deciding = ApprovalRule.objects.get(tool_pattern="read_file")
    assert body["decision"] == "allow"
    assert body["rule"] == {
        "id": deciding.pk, "group": None, "tool_pattern": "read_file", "arg_matchers": {}, "action": "allow",
        "priority": 100, "enabled": True, "approval_ttl": None, "note": "default: read-only tool",
    }
    assert body["rule_set"] == "global"
    assert len(body["trace"]) == DEFAULT_RULE_COUNT
    results = {entry["rule"]["tool_pattern"]: (entry["result"], entry["chosen"]) for entry in body["trace"]
               if not any(path.startswith("$provenance.") for path in entry["rule"]["arg_matchers"])}
    assert results["read_file"] == ("match", True)
    assert results["*"] == ("match", False)
    assert results["write_file"] == ("no_match", False)


def test_explain_names_a_group_rule_with_its_group(api, carol, bob):
    ops = SecurityGroup.objects.create(name="ops")
    ops.users.add(bob)
    rule = ApprovalRule.objects.create(group=ops, tool_pattern="execute_*", arg_matchers={"argv.0": "rm"},
                                       action="deny", priority=1, note="never rm")
    body = explain(api(carol), "execute_cmd", {"argv": ["rm", "-rf", "/"]}, user=str(bob.pk)).json()
    assert body["decision"] == "deny"
    assert body["rule"]["id"] == rule.pk and body["rule"]["group"] == {"id": ops.pk, "name": "ops"}
    assert body["rule_set"] == "group:ops"
    # Bob's arguments decide: with another command the group rule no longer matches.
    other = explain(api(carol), "execute_cmd", {"argv": ["uptime"]}, user="bob").json()
    assert (other["decision"], other["rule"]["tool_pattern"]) == ("require", "execute_cmd")
    group_entry = next(e for e in other["trace"] if e["rule_set"] == "group:ops")
    assert group_entry["result"] == "no_match" and "argv.0" in group_entry["detail"]


def test_with_no_rules_at_all_every_call_is_denied(api, alice, troubleshooter):
    ApprovalRule.objects.all().delete()
    for tool in ("read_file", "write_file", "ask_human", "unknown_tool"):
        body = explain(api(alice), tool, {}, user="alice", agent="troubleshooter").json()
        assert body == {"decision": "deny", "rule": None, "rule_set": None, "reason": "no matching rule",
                        "provenance_fired": [], "trace": []}


def test_empty_or_absent_args_mean_no_arguments(api, alice):
    for params in ({"tool": "execute_cmd", "user": "alice", "args": ""}, {"tool": "execute_cmd", "user": "alice"}):
        body = api(alice).get(EXPLAIN, params).json()
        assert (body["decision"], body["rule"]["tool_pattern"]) == ("require", "execute_cmd")


def test_a_call_without_user_or_agent_is_denied_for_want_of_scope(api, alice):
    body = explain(api(alice), "read_file").json()
    assert (body["decision"], body["rule"], body["reason"]) == ("deny", None, "no scope")


@pytest.mark.parametrize("args", ["{not json", "[1, 2]", '"text"', "null"], ids=["bad json", "list", "string", "null"])
def test_bad_args_are_a_400_invalid(api, alice, args):
    response = explain(api(alice), "read_file", args, user="alice")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and "args" in body["extra"]["fields"]


def test_a_missing_tool_is_400_invalid(api, alice):
    response = api(alice).get(EXPLAIN, {"user": "alice"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid" and "tool" in response.json()["extra"]["fields"]


@pytest.mark.parametrize(("params", "code"), [
    ({"tool": "read_file", "user": "nobody"}, "user_unknown"),
    ({"tool": "read_file", "user": "999999"}, "user_unknown"),
    ({"tool": "read_file", "agent": "no-such-agent"}, "agent_unknown"),
])
def test_an_unknown_user_or_agent_is_404_naming_which(api, alice, params, code):
    """A well-formed name that exists nowhere is a 404 with its own code, as an id would be (the
    schema cannot know which names exist, so a 400 would refuse a schema-valid request)."""
    response = api(alice).get(EXPLAIN, params)
    assert response.status_code == 404
    assert response.json()["code"] == code


def test_an_agent_alone_is_a_scope(api, alice):
    Agent.objects.create(name="helper", kind=AgentKind.TASK)
    body = explain(api(alice), "write_file", {"path": "x"}, agent="helper").json()
    assert (body["decision"], body["rule"]["tool_pattern"]) == ("require", "write_file")


@pytest.mark.parametrize("url", [EXPLAIN + "?tool=read_file&user=alice", TOOLS])
@pytest.mark.parametrize("who", ["bob", "dave", "charlie"])
def test_only_approvers_and_operators_may_ask(api, request, who, url):
    response = api(request.getfixturevalue(who)).get(url)
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"


@pytest.mark.parametrize("url", [EXPLAIN + "?tool=read_file", TOOLS])
def test_anonymous_callers_are_refused(api, url):
    response = api(None).get(url)
    assert response.status_code == 401 and response.json()["code"] == "not_authenticated"


def test_the_tool_list_covers_registry_interface_and_known_tools_once_each(api, carol, alice):
    now = clock.now()
    for name in ("read_file", "execute_task", "mcp_lookup"):
        KnownTool.objects.create(name=name, description="seen", first_seen=now, last_seen=now)
    for user in (carol, alice):
        response = api(user).get(TOOLS)
        assert response.status_code == 200
        tools = response.json()
        names = [t["name"] for t in tools]
        assert len(names) == len(set(names))
        categories = {t["name"]: t["category"] for t in tools}
        assert categories["read_file"] == "registry"
        assert categories["write_file"] == "registry"
        # The delegation tools are real tools in the registry now (skald/tools/delegation.py).
        assert categories["execute_subtask"] in {"registry", "interface"}
        assert categories["list_agents"] in {"registry", "interface"}
        assert categories["mcp_lookup"] == "dynamic"
        assert categories["execute_task"] in {"registry", "interface"}  # never listed as dynamic
        assert all(set(t) == {"name", "category", "description"} for t in tools)


def test_the_schema_documents_both_operations_and_their_errors(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    explain_op = schema["paths"]["/api/approval/explain"]["get"]
    assert explain_op["operationId"] == "approval_explain"
    assert {"200", "400", "401", "403"} <= set(explain_op["responses"])  # plus the request guard's
    assert {p["name"] for p in explain_op["parameters"]} == {"tool", "args", "user", "agent", "provenance"}
    body = schema["components"]["schemas"]["ApprovalExplain"]
    assert {"decision", "rule", "trace"} <= set(body["properties"])
    tools_op = schema["paths"]["/api/approval/tools"]["get"]
    assert tools_op["operationId"] == "approval_tools"
    assert {"200", "401", "403"} <= set(tools_op["responses"])
