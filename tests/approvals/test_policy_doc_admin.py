"""The rule page previews an edit's impact on recorded calls, and a looser gate needs a confirmation (issue 32)."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from approvals.models import ApprovalRule
from loop.providers.loopback import text_turn, tool_turn
from skald.sessions.services import session_message_submit
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

RULES = "/admin/approvals/approvalrule/"


def form_of(rule: ApprovalRule, **overrides: str) -> dict[str, str]:
    return {"group": "", "tool_pattern": rule.tool_pattern, "arg_matchers": "{}", "action": rule.action,
            "priority": str(rule.priority), "approval_ttl": "", "enabled": "on", "note": rule.note,
            "initial-arg_matchers": "{}", **overrides}


def test_loosening_a_rule_shows_the_calls_it_would_have_let_through_and_asks_first(
        client, alice, troubleshooting, script) -> None:
    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")  # parked: require
    rule = ApprovalRule.objects.get(tool_pattern="write_file", group__isnull=True)
    client.force_login(make_user("root", superuser=True))

    page = client.post(f"{RULES}{rule.pk}/change/", form_of(rule, action="allow"))
    assert page.status_code == 200
    [error] = page.context["adminform"].form.non_field_errors()
    assert error == ("This change would have let 1 call from 1 user run with less restriction in the last 7 days "
                     "(1 approval → allowed). Tick 'Confirm a looser gate' and save again.")
    rule.refresh_from_db()
    assert rule.action == "require"

    saved = client.post(f"{RULES}{rule.pk}/change/", form_of(rule, action="allow", confirm_loosening="on"))
    assert saved.status_code == 302
    rule.refresh_from_db()
    assert rule.action == "allow"
    notes = [str(m) for m in get_messages(saved.wsgi_request)]
    assert any(n.startswith("Impact on recorded calls: 1 of 1 recorded calls in the last 7 days") for n in notes)


def test_a_tighter_or_unrelated_edit_saves_at_once(client, alice, troubleshooting, script) -> None:
    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")
    client.force_login(make_user("root", superuser=True))
    rule = ApprovalRule.objects.get(tool_pattern="write_file", group__isnull=True)
    assert "Confirm a looser gate" in client.get(f"{RULES}{rule.pk}/change/").content.decode()
    assert client.post(f"{RULES}{rule.pk}/change/", form_of(rule, action="deny")).status_code == 302
    other = ApprovalRule.objects.get(tool_pattern="read_logs")
    assert client.post(f"{RULES}{other.pk}/change/", form_of(other, priority="90")).status_code == 302
