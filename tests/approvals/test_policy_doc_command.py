"""``manage.py skald_policy``: export, plan and apply from files, as a CI job runs them (issue 32)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command

from approvals.models import ApprovalRule
from approvals.policy_doc.export import policy_export
from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.approvals.policy_fixtures import configure

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]


def run(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("skald_policy", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.fixture
def exported(alice: User, tmp_path: Path) -> Path:
    configure(alice)
    path = tmp_path / "policy.yaml"
    assert run("export", str(path))[0] == 0
    return path


def test_export_plan_apply_as_a_pipeline_would(exported: Path) -> None:
    data = yaml.safe_load(exported.read_text())
    data["rules"].append({"tool": "deploy", "action": "deny", "priority": 100})
    exported.write_text(yaml.safe_dump(data, sort_keys=False))

    status, out, _ = run("plan", str(exported), "--json")
    plan = json.loads(out)
    assert status == 0 and [c["words"] for c in plan["changes"]] == [
        f"Create global rule deny 'deploy' @100 (rules[{len(data['rules']) - 1}])"]
    assert not ApprovalRule.objects.filter(tool_pattern="deploy").exists()

    status, out, _ = run("apply", str(exported), "--expect-digest", plan["live_digest"], "--actor", "alice")
    assert status == 0 and out.startswith(f"Applied {plan['digest']} (1 changes;")
    row = AuditEvent.objects.filter(kind=AuditKind.POLICY_APPLIED).get()
    assert (row.subject_id, row.actor_type, row.actor_id) == (plan["digest"], "user", str(User.objects.get(
        username="alice").pk))
    assert policy_export()[1] == plan["digest"]


def test_a_stale_digest_exits_3_with_the_code(exported: Path) -> None:
    status, out, _ = run("apply", str(exported), "--expect-digest", "0" * 64, "--json")
    assert status == 3 and json.loads(out)["code"] == "policy_changed"
    assert not AuditEvent.objects.filter(kind=AuditKind.POLICY_APPLIED).exists()


def test_an_invalid_document_exits_2_naming_the_path(exported: Path) -> None:
    data = yaml.safe_load(exported.read_text())
    data["rules"][3]["priority"] = "soon"
    exported.write_text(yaml.safe_dump(data, sort_keys=False))
    status, _, err = run("apply", str(exported))
    assert status == 2
    assert err.splitlines()[1].startswith("  rules[3].priority: Priority must be a whole number")


def test_plan_in_words_ends_with_the_digest_to_expect(exported: Path) -> None:
    status, out, _ = run("plan", str(exported), "--no-impact")
    assert status == 0 and "No changes" in out
    assert out.splitlines()[-1] == f"Apply exactly this plan with --expect-digest {policy_export()[1]}"


def test_schema_prints_the_published_schema() -> None:
    status, out, _ = run("schema")
    assert status == 0 and json.loads(out)["title"] == "Skald policy document"
