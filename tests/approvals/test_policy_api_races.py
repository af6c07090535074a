"""PATCHes raced with the same ETag: one winner, every other a 412, nothing overwritten (issue 32)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User

from approvals.models import ApprovalRule, SecurityGroup
from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.approvals.policy_fixtures import configure
from tests.conftest import make_user
from tests.race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

N = 4


def test_patches_raced_with_one_etag_make_one_winner_and_412s(api: Any, alice: User) -> None:
    configure(alice)
    root = make_user("root", superuser=True)
    rule = ApprovalRule.objects.get(tool_pattern="execute_cmd", group__name="ops")
    url = f"/api/policy/rules/{rule.pk}/"
    etag = api(root).get(url)["ETag"]
    clients = [api(root) for _ in range(N)]  # one client per thread

    answers = race(N, lambda i: clients[i].patch(url, {"priority": 200 + i}, format="json", HTTP_IF_MATCH=etag))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] + [412] * (N - 1), answers
    won = next(i for i, a in enumerate(answers) if a.status_code == 200)
    assert all(a.json()["code"] == "precondition_failed" for a in answers if a.status_code == 412)
    rule.refresh_from_db()
    assert rule.priority == 200 + won
    changes = [json.loads(e.payload) for e in AuditEvent.objects.filter(kind=AuditKind.RULE_CHANGED,
                                                                        subject_id=str(rule.pk))]
    assert [c["rule"]["priority"] for c in changes if c.get("changed") == ["priority"]] == [200 + won]


def test_a_group_delete_raced_with_a_change_to_its_rule_never_deletes_the_change_unseen(api: Any,
                                                                                       alice: User) -> None:
    configure(alice)
    root = make_user("root", superuser=True)
    group = SecurityGroup.objects.get(name="ops")
    rule = ApprovalRule.objects.get(tool_pattern="execute_cmd", group=group)
    group_tag = api(root).get(f"/api/policy/groups/{group.pk}/")["ETag"]
    rule_tag = api(root).get(f"/api/policy/rules/{rule.pk}/")["ETag"]
    clients = [api(root), api(root)]

    def act(i: int) -> Any:
        if i == 0:
            return clients[0].delete(f"/api/policy/groups/{group.pk}/", HTTP_IF_MATCH=group_tag)
        return clients[1].patch(f"/api/policy/rules/{rule.pk}/", {"priority": 1}, format="json",
                                HTTP_IF_MATCH=rule_tag)

    deleted, patched = race(2, act)
    # Either the delete came first (the rule is gone: the PATCH finds nothing) or the PATCH did (the
    # group changed under the delete's ETag: 412, the group and the changed rule stay).
    assert (deleted.status_code, patched.status_code) in {(200, 404), (412, 200)}, (deleted, patched)
    if deleted.status_code == 412:
        rule.refresh_from_db()
        assert rule.priority == 1 and SecurityGroup.objects.filter(pk=group.pk).exists()
