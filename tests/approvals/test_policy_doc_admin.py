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


def test_the_live_preview_says_what_an_edit_would_change_before_anything_is_saved(
        client, alice, troubleshooting, script) -> None:
    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")  # parked: require
    rule = ApprovalRule.objects.get(tool_pattern="write_file", group__isnull=True)
    client.force_login(make_user("root", superuser=True))
    preview = f"{RULES}impact-preview/"

    looser = client.post(preview, {**form_of(rule, action="allow"), "rule_id": str(rule.pk)}).json()
    assert looser["state"] == "loosens"
    assert looser["text"] == ("This change would have let 1 call from 1 user run with less restriction in the last "
                              "7 days (1 approval → allowed).")
    assert looser["impact"]["transitions"] == {"approval → allowed": 1}
    tighter = client.post(preview, {**form_of(rule, action="deny"), "rule_id": str(rule.pk)}).json()
    assert tighter["state"] == "tightens"
    assert tighter["text"].startswith("1 of 1 recorded calls in the last 7 days would be decided differently.")
    new = client.post(preview, {**form_of(rule, tool_pattern="read_logs", action="deny", priority="1")}).json()
    assert new["state"] == "same"  # the history has no read_logs call
    invalid = client.post(preview, {**form_of(rule, action="maybe"), "rule_id": str(rule.pk)}).json()
    assert invalid["state"] == "invalid"
    assert client.post(preview, {"rule_id": "x1"}).status_code == 400
    assert client.post(preview, {"rule_id": "987654"}).status_code == 404
    assert client.get(preview).status_code == 405
    rule.refresh_from_db()
    assert rule.action == "require"  # a preview saves nothing


def test_the_delete_page_says_what_removing_the_rule_would_have_changed(client, alice, troubleshooting, script) -> None:
    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")  # parked: require
    rule = ApprovalRule.objects.get(tool_pattern="write_file", group__isnull=True)
    client.force_login(make_user("root", superuser=True))
    page = client.get(f"{RULES}{rule.pk}/delete/")
    assert page.status_code == 200
    # Without the rule the catch-all '*' (require) decides the write: the same verdict, nothing changes.
    assert page.context["rule_impact_state"] == "same"
    assert "0 of 1 recorded calls in the last 7 days would be decided differently." in page.content.decode()
    catch_all = ApprovalRule.objects.get(tool_pattern="*", group__isnull=True)
    assert client.post(f"{RULES}{rule.pk}/delete/", {"post": "yes"}).status_code == 302
    page = client.get(f"{RULES}{catch_all.pk}/delete/")
    # With no rule left the gate fails closed: the write would have been denied.
    assert page.context["rule_impact_state"] == "tightens"
    assert "1 of 1 recorded calls in the last 7 days would be decided differently." in page.content.decode()
