"""The organisation's notification subscriptions in the policy document (issue 32): exported, planned
and applied through the notification services the admin and the API use; a person's own
subscriptions and every signing secret stay out."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth.models import User

from approvals.models import SecurityGroup
from approvals.policy_doc.apply import policy_apply
from approvals.policy_doc.export import policy_export
from approvals.policy_doc.parse import PolicyInvalid, load_text, parse
from approvals.policy_doc.plan import policy_plan
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.notifications.models import Subscription
from skald.notifications.services import subscription_create
from tests.approvals.policy_fixtures import ADMIN, configure

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]


@pytest.fixture
def configured(alice: User, settings) -> SecurityGroup:
    settings.SKALD_MCP_STDIO_ALLOWLIST = ()
    return configure(alice)


def document(change) -> str:
    text, _ = policy_export()
    data = yaml.safe_load(text)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def test_the_export_holds_the_organisations_subscriptions_never_a_persons_own_or_a_secret(
        configured: SecurityGroup, alice: User) -> None:
    subscription_create(actor=ADMIN, owner=alice, data={"name": "mine", "channel": "user_email", "target": "",
                                                       "events": ["approval.pending"]})
    text, _ = policy_export()
    assert yaml.safe_load(text)["notifications"] == [{
        "name": "on-call", "channel": "email", "target": "oncall@example.org",
        "events": ["approval.expired", "approval.pending"], "chain_order": 1}]
    for secret in Subscription.objects.values_list("secret", flat=True):
        assert secret not in text


def test_plan_and_apply_create_change_and_delete_subscriptions_through_the_services(
        configured: SecurityGroup, settings) -> None:
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"

    def change(data: dict) -> None:
        data["notifications"][0].update(escalate_after_minutes=15, min_risk="high")
        data["notifications"].append({"name": "ops-chat", "channel": "slack",
                                      "target": "https://127.0.0.1:9443/hooks/ops", "events": ["run.failed"]})

    text = document(change)
    plan = policy_plan(parse(load_text(text)), days=None)
    assert [c.words() for c in plan.changes] == [
        "Change notification subscription #1 'on-call': min_risk, escalate_after_minutes (notifications[0])"
        .replace("#1", f"#{Subscription.objects.get(name='on-call').pk}"),
        "Create notification subscription 'ops-chat' (slack https://127.0.0.1:9443/hooks/ops: run.failed) "
        "(notifications[1])",
    ]
    before = AuditEvent.objects.filter(kind=AuditKind.NOTIFY_SUBSCRIPTION_CHANGED).count()
    applied = policy_apply(actor=ADMIN, doc=parse(load_text(text)), expect_digest=plan.live_digest)
    assert [(c.op, c.subject) for c in applied.changes] == [("update", "subscription"), ("create", "subscription")]
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_SUBSCRIPTION_CHANGED).count() == before + 2
    on_call, ops = Subscription.objects.filter(owner__isnull=True).order_by("name")
    assert (on_call.escalate_after_minutes, on_call.min_risk) == (15, "high")
    assert ops.secret.startswith("whsec_") and ops.owner_id is None  # a new signing secret, the organisation's
    assert policy_plan(parse(load_text(policy_export()[0])), days=None).changes == ()

    applied = policy_apply(actor=ADMIN, doc=parse(load_text(document(lambda d: d["notifications"].pop(0)))))
    assert [(c.op, c.subject) for c in applied.changes] == [("delete", "subscription")]
    assert list(Subscription.objects.values_list("name", flat=True)) == ["ops-chat"]


def test_a_receiver_the_screen_refuses_rolls_back_the_whole_document_and_is_named_by_path(
        configured: SecurityGroup, settings) -> None:
    settings.SKALD_NOTIFY_ALLOW_CIDRS = ""  # no private receiver allowed

    def change(data: dict) -> None:
        data["rules"][0]["priority"] = 7
        data["notifications"].append({"name": "inside", "channel": "webhook", "target": "https://10.1.2.3/hook",
                                      "events": ["approval.pending"]})

    with pytest.raises(PolicyInvalid) as refused:
        policy_apply(actor=ADMIN, doc=parse(load_text(document(change))))
    [problem] = refused.value.problems
    assert (problem.path, problem.code) == ("notifications[1].target", "notify_ssrf_refused")
    assert not Subscription.objects.filter(name="inside").exists()
    assert yaml.safe_load(policy_export()[0])["rules"][0]["priority"] != 7


@pytest.mark.parametrize(("entry", "path", "code"), [
    ({"name": "x", "channel": "user_email", "target": "", "events": ["run.failed"]}, "notifications[1].channel",
     "invalid"),
    ({"name": "x", "channel": "email", "target": "a@example.org", "events": ["run.exploded"]},
     "notifications[1].events[0]", "invalid"),
    ({"name": "x", "channel": "email", "target": "a@example.org", "events": []}, "notifications[1].events", "invalid"),
    ({"name": "x", "channel": "email", "target": "a@example.org", "events": ["run.failed"], "secret": "whsec_x"},
     "notifications[1].secret", "unknown_field"),
    ({"name": "x", "channel": "email", "target": "a@example.org", "events": ["run.failed"],
      "escalate_after_minutes": 0}, "notifications[1].escalate_after_minutes", "invalid"),
    ({"name": "on-call", "channel": "email", "target": "a@example.org", "events": ["run.failed"]},
     "notifications[1].name", "duplicate"),
])
def test_a_malformed_subscription_is_refused_by_path(configured: SecurityGroup, entry: dict, path: str,
                                                     code: str) -> None:
    with pytest.raises(PolicyInvalid) as refused:
        parse(load_text(document(lambda data: data["notifications"].append(entry))))
    assert (path, code) in {(p.path, p.code) for p in refused.value.problems}
