"""Applies raced with the same --expect-digest: one winner, every other a 409 (issue 32)."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth.models import User

from approvals.models import ApprovalRule
from approvals.policy_doc.apply import PolicyChanged, policy_apply
from approvals.policy_doc.document import digest
from approvals.policy_doc.export import policy_export
from approvals.policy_doc.parse import parse
from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.approvals.policy_fixtures import ADMIN, configure
from tests.race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

N = 4


def test_applies_raced_against_one_digest_make_one_winner_and_409s(alice: User) -> None:
    configure(alice)
    text, live = policy_export()
    docs = []
    for i in range(N):  # each racer proposes a different document, planned against the same live policy
        data = yaml.safe_load(text)
        data["rules"].append({"tool": "deploy", "action": "deny", "priority": 100 + i})
        docs.append(parse(data))

    answers = race(N, lambda i: policy_apply(actor=ADMIN, doc=docs[i], expect_digest=live))
    won = [i for i, a in enumerate(answers) if not isinstance(a, BaseException)]
    lost = [a for a in answers if isinstance(a, BaseException)]
    assert len(won) == 1, answers
    assert all(isinstance(a, PolicyChanged) and a.http_status == 409 for a in lost), answers
    assert policy_export()[1] == digest(docs[won[0]])
    assert list(ApprovalRule.objects.filter(tool_pattern="deploy").values_list("priority", flat=True)) == [
        100 + won[0]]
    assert AuditEvent.objects.filter(kind=AuditKind.POLICY_APPLIED).count() == 1
