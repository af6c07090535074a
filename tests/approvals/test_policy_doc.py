"""The policy document: export, plan and apply (issue 32)."""

from __future__ import annotations

import json
from datetime import timedelta

import jsonschema
import pytest
import yaml
from django.contrib.auth.models import User

from approvals.models import ApprovalRule, SecurityGroup, TripwireAllowEntry, TripwirePattern
from approvals.policy_doc.apply import PolicyChanged, policy_apply
from approvals.policy_doc.document import digest, render
from approvals.policy_doc.export import policy_export
from approvals.policy_doc.live import policy_live
from approvals.policy_doc.parse import PolicyInvalid, load_text, parse
from approvals.policy_doc.plan import policy_plan
from approvals.policy_doc.schema import policy_schema
from approvals.rules.services import approval_rule_save, security_group_save
from approvals.tripwires.services import tripwire_allow_save, tripwire_pattern_save
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.models import Agent
from tests.approvals.policy_fixtures import ADMIN, configure

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]


@pytest.fixture
def configured(alice: User) -> SecurityGroup:
    return configure(alice)


def edited(text: str, change) -> str:
    data = yaml.safe_load(text)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def audit_count() -> int:
    return AuditEvent.objects.count()


def test_it_exports_the_configuration_in_canonical_order(configured: SecurityGroup) -> None:
    text, _ = policy_export()
    data = yaml.safe_load(text)
    assert data["version"] == 1
    assert [r["tool"] for r in data["rules"]][-1] == "*"  # the catch-all sits last (priority 999999)
    [ops] = data["groups"]
    assert ops["users"] == ["alice"] and ops["agents"] == ["troubleshooter"]
    assert ops["rules"] == [
        {"tool": "write_file", "action": "require", "priority": 10, "args": {"path": "reports/*"},
         "approval_ttl": 7200},
        {"tool": "execute_cmd", "action": "deny", "priority": 50, "note": "ops never run commands"},
    ]
    assert data["tripwires"]["patterns"] == [{"name": "acme-key", "regex": "ACME-[0-9A-F]{16}", "keywords": "acme-"}]
    assert data["tripwires"]["allow"] == [{"regex": "ACME-0{16}", "reason": "the documented example key"}]


def test_the_export_conforms_to_the_published_schema(configured: SecurityGroup) -> None:
    text, _ = policy_export()
    jsonschema.Draft202012Validator.check_schema(policy_schema())
    jsonschema.validate(yaml.safe_load(text), policy_schema())


def test_export_apply_export_is_byte_identical(configured: SecurityGroup) -> None:
    text, first_digest = policy_export()
    applied = policy_apply(actor=ADMIN, doc=parse(load_text(text)))
    assert applied.changes == () and applied.digest == first_digest == applied.previous_digest
    again, again_digest = policy_export()
    assert again.encode() == text.encode() and again_digest == first_digest


def test_after_applying_any_document_the_export_is_that_document_canonically(configured: SecurityGroup,
                                                                               bob: User) -> None:
    text, _ = policy_export()

    def change(data: dict) -> None:
        data["rules"][0]["priority"] = 5  # an update
        data["rules"].append({"tool": "read_*", "action": "allow", "priority": 200, "args": {"path": "docs/*"}})
        data["groups"][0]["users"] = ["bob", "alice"]  # unsorted: canonical order sorts members
        data["groups"][0]["rules"].pop()  # a delete
        data["groups"].append({"name": "auditors", "users": ["bob"],
                               "rules": [{"tool": "*", "action": "deny", "priority": 1}]})
        data["tripwires"]["patterns"] = []
        data["tripwires"]["allow"][0]["reason"] = "documented in the README"

    proposed = parse(load_text(edited(text, change)))
    policy_apply(actor=ADMIN, doc=proposed)
    exported, exported_digest = policy_export()
    assert exported == render(proposed) and exported_digest == digest(proposed)
    # and once more: the export applies to no change at all
    assert policy_apply(actor=ADMIN, doc=parse(load_text(exported))).changes == ()
    assert not TripwirePattern.objects.exists()
    assert SecurityGroup.objects.get(name="auditors").users.get().username == "bob"


def test_plan_names_every_change_and_changes_nothing(configured: SecurityGroup) -> None:
    text, live_digest = policy_export()

    def change(data: dict) -> None:
        data["groups"][0]["rules"][1]["action"] = "require"
        data["rules"].append({"tool": "deploy", "action": "deny", "priority": 100})

    before_rules = list(ApprovalRule.objects.order_by("id").values())
    before_audit = audit_count()
    plan = policy_plan(parse(load_text(edited(text, change))))
    assert list(ApprovalRule.objects.order_by("id").values()) == before_rules
    assert audit_count() == before_audit and policy_export()[1] == live_digest
    assert plan.live_digest == live_digest
    words = [c.words() for c in plan.changes]
    assert any(w.startswith("Change group 'ops' rule #") and "action 'deny' → 'require'" in w for w in words)
    assert any(w.startswith("Create global rule deny 'deploy' @100") for w in words)
    as_json = json.loads(json.dumps(plan.as_dict()))
    assert {c["op"] for c in as_json["changes"]} == {"update", "create"}
    assert as_json["impact"]["total"] == 0


def test_plan_warns_of_a_rule_that_can_never_win_by_its_path(configured: SecurityGroup) -> None:
    text, _ = policy_export()

    def change(data: dict) -> None:
        data["rules"].append({"tool": "search_knowledge", "action": "deny", "priority": 500})

    plan = policy_plan(parse(load_text(edited(text, change))))
    [warning] = [w for w in plan.warnings if "search_knowledge" not in w.path]
    assert warning.path == f"rules[{len(yaml.safe_load(text)['rules'])}]"
    assert warning.message.startswith("Never wins: rule rules[")


def test_an_invalid_rule_is_named_by_its_path_and_nothing_changes(configured: SecurityGroup) -> None:
    text, live_digest = policy_export()

    def change(data: dict) -> None:
        data["rules"][0]["note"] = "changed"  # a valid change that must not land either
        data["rules"][3]["priority"] = -1
        data["groups"][0]["rules"][0]["action"] = "maybe"

    before = audit_count()
    with pytest.raises(PolicyInvalid) as caught:
        policy_apply(actor=ADMIN, doc=parse(load_text(edited(text, change))))
    assert caught.value.code == "policy_invalid" and caught.value.http_status == 400
    assert [p["path"] for p in caught.value.extra["problems"]] == ["rules[3].priority", "groups[0].rules[0].action"]
    assert policy_export()[1] == live_digest and audit_count() == before


def test_an_unknown_member_is_refused_by_path_and_nothing_changes(configured: SecurityGroup) -> None:
    text, live_digest = policy_export()

    def change(data: dict) -> None:
        data["rules"][0]["note"] = "changed"
        data["groups"][0]["users"].append("mallory")

    with pytest.raises(PolicyInvalid) as caught:
        policy_apply(actor=ADMIN, doc=parse(load_text(edited(text, change))))
    assert caught.value.extra["problems"] == [
        {"path": "groups[0].users", "code": "unknown_user", "message": "No user is named 'mallory'."}]
    assert policy_export()[1] == live_digest


@pytest.mark.parametrize(("document", "path", "code"), [
    ("version: 2\n", "version", "unsupported_version"),
    ("rules: []\n", "version", "required"),
    ("version: 1\nrules: [{tool: x, action: allow, priority: 1, colour: red}]\n", "rules[0].colour", "unknown_field"),
    ("version: 1\nrules: [{tool: x, action: allow}]\n", "rules[0].priority", "required"),
    ("version: 1\nrules: [{tool: x, action: allow, priority: 1, args: {path: 3}}]\n", "rules[0].args", "invalid"),
    ("version: 1\ngroups: [{name: a}, {name: a}]\n", "groups[1].name", "duplicate"),
    ("version: 1\ntripwires: {patterns: [{name: k, regex: '('}]}\n", "tripwires.patterns[0].regex", "invalid"),
    ("version: 1\ntripwires: {allow: [{regex: 'x', reason: ''}]}\n", "tripwires.allow[0].reason", "invalid"),
    ("version: 1\nrules: [\n", "line 3", "yaml_syntax"),  # the end of the text
])
def test_parse_names_the_problem_by_path(document: str, path: str, code: str) -> None:
    with pytest.raises(PolicyInvalid) as caught:
        parse(load_text(document))
    assert (caught.value.problems[0].path, caught.value.problems[0].code) == (path, code)


def test_a_stale_expect_digest_is_refused_and_changes_nothing(configured: SecurityGroup) -> None:
    text, _ = policy_export()
    proposed = parse(load_text(edited(text, lambda d: d["rules"].append(
        {"tool": "deploy", "action": "deny", "priority": 100}))))
    plan = policy_plan(proposed, days=None)
    # Someone edits a rule in the admin between the plan and the apply.
    rule = ApprovalRule.objects.get(tool_pattern="read_logs")
    rule.priority = 90
    approval_rule_save(actor=ADMIN, rule=rule, changed=["priority"])
    moved = policy_export()[1]
    with pytest.raises(PolicyChanged) as caught:
        policy_apply(actor=ADMIN, doc=proposed, expect_digest=plan.live_digest)
    assert (caught.value.code, caught.value.http_status) == ("policy_changed", 409)
    assert caught.value.extra == {"expected": plan.live_digest, "live_digest": moved}
    assert policy_export()[1] == moved and not ApprovalRule.objects.filter(tool_pattern="deploy").exists()
    policy_apply(actor=ADMIN, doc=proposed, expect_digest=moved)  # the current digest is taken
    assert ApprovalRule.objects.filter(tool_pattern="deploy").exists()


def test_apply_writes_one_row_naming_the_digest_beside_the_services_rows(configured: SecurityGroup) -> None:
    text, previous = policy_export()
    proposed = parse(load_text(edited(text, lambda d: d["rules"].append(
        {"tool": "deploy", "action": "deny", "priority": 100}))))
    last = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    applied = policy_apply(actor=ADMIN, doc=proposed)
    rows = list(AuditEvent.objects.filter(seq__gt=last).order_by("seq"))
    assert [row.kind for row in rows] == [AuditKind.RULE_CHANGED, AuditKind.POLICY_APPLIED]
    assert json.loads(rows[0].payload)["rule"]["tool_pattern"] == "deploy"  # the admin's own row
    applied_row = rows[1]
    assert applied_row.subject_type == "policy" and applied_row.subject_id == applied.digest == digest(proposed)
    assert json.loads(applied_row.payload) == {"digest": applied.digest, "previous_digest": previous, "changes": 1,
                                                "by_kind": {"rule.create": 1}}
    assert policy_live() == proposed


def test_awkward_values_survive_the_round_trip(configured: SecurityGroup) -> None:
    approval_rule_save(actor=ADMIN, rule=ApprovalRule(
        tool_pattern="exec*", arg_matchers={"argv.0": "[!x]*", "opts.mode": "'yes': no"}, action="deny", priority=0,
        approval_ttl=timedelta(0), enabled=False, note="Ünïcode: « quoted » # not a comment"), changed=["created"])
    approval_rule_save(actor=ADMIN, rule=ApprovalRule(tool_pattern="*", action="deny", priority=999_999,
                                                      note="a twin of the catch-all's key"), changed=["created"])
    empty = SecurityGroup(name="empty: group")
    security_group_save(actor=ADMIN, group=empty, changed=["created"])
    tripwire_pattern_save(actor=ADMIN, pattern=TripwirePattern(name="off", regex="x{3}", enabled=False),
                          changed=["created"])
    tripwire_allow_save(actor=ADMIN, entry=TripwireAllowEntry(regex="ACME-0{16}", reason="a second reason",
                                                              enabled=False), changed=["created"])
    text, first = policy_export()
    jsonschema.validate(yaml.safe_load(text), policy_schema())
    applied = policy_apply(actor=ADMIN, doc=parse(load_text(text)))
    assert applied.changes == ()
    assert policy_export() == (text, first)


def test_agents_tools_and_bounds_are_governed_by_the_document(configured: SecurityGroup) -> None:
    text, _ = policy_export()
    agents = yaml.safe_load(text)["agents"]
    index = next(i for i, a in enumerate(agents) if a["name"] == "troubleshooter")
    assert "execute_task" in agents[index]["tools"]

    def change(data: dict) -> None:
        data["agents"][index]["tools"].remove("execute_task")
        data["agents"][index]["bounds"] = {"max_turns": 5, "budget_tokens": 20000}
        data["agents"][index]["exec_allowlist"] = ["ls"]

    proposed = parse(load_text(edited(text, change)))
    [words] = [c.words() for c in policy_plan(proposed, days=None).changes]
    assert words == ("Change agent 'troubleshooter': tools -execute_task; bounds budget_tokens default → 20000, "
                     f"max_turns default → 5; exec allow-list ls (agents[{index}])")
    last = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    policy_apply(actor=ADMIN, doc=proposed)
    agent = Agent.objects.get(name="troubleshooter")
    assert "execute_task" not in agent.allowed_tools and agent.bounds == {"max_turns": 5, "budget_tokens": 20000}
    assert agent.exec_allowlist == ["ls"]
    [row] = AuditEvent.objects.filter(seq__gt=last, kind=AuditKind.AGENT_CHANGED)
    assert json.loads(row.payload)["changed"] == ["allowed_tools", "bounds", "exec_allowlist"]
    assert policy_export()[0] == render(proposed)


def test_a_document_lists_every_agent_and_only_agents_that_exist(configured: SecurityGroup) -> None:
    text, live_digest = policy_export()

    def change(data: dict) -> None:
        data["agents"].pop(0)
        data["agents"].append({"name": "ghost", "tools": []})

    with pytest.raises(PolicyInvalid) as caught:
        policy_apply(actor=ADMIN, doc=parse(load_text(edited(text, change))))
    codes = {(p["path"], p["code"]) for p in caught.value.extra["problems"]}
    first = yaml.safe_load(text)["agents"][0]["name"]
    assert codes == {(f"agents[{len(yaml.safe_load(text)['agents']) - 1}].name", "unknown_agent"),
                     ("agents", "missing_agent")}
    assert first in caught.value.message or any(first in p["message"] for p in caught.value.extra["problems"])
    assert policy_export()[1] == live_digest


def test_bounds_the_loop_would_refuse_are_named_by_path() -> None:
    with pytest.raises(PolicyInvalid) as caught:
        parse(load_text("version: 1\nagents: [{name: a, bounds: {max_turns: 0}}, {name: b, bounds: {speed: 3}}]\n"))
    assert [(p.path, p.code) for p in caught.value.problems] == [("agents[0].bounds", "invalid"),
                                                                 ("agents[1].bounds", "invalid")]
