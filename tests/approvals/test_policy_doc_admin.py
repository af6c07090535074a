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

    looser = client.post(preview, {**form_of(rule, action="allow"), "object_id": str(rule.pk)}).json()
    assert looser["state"] == "loosens"
    assert looser["text"] == ("This change would have let 1 call from 1 user run with less restriction in the last "
                              "7 days (1 approval → allowed).")
    assert looser["impact"]["transitions"] == {"approval → allowed": 1}
    tighter = client.post(preview, {**form_of(rule, action="deny"), "object_id": str(rule.pk)}).json()
    assert tighter["state"] == "tightens"
    assert tighter["text"].startswith("1 of 1 recorded calls in the last 7 days would be decided differently.")
    new = client.post(preview, {**form_of(rule, tool_pattern="read_logs", action="deny", priority="1")}).json()
    assert new["state"] == "same"  # the history has no read_logs call
    invalid = client.post(preview, {**form_of(rule, action="maybe"), "object_id": str(rule.pk)}).json()
    assert invalid["state"] == "invalid"
    assert client.post(preview, {"object_id": "x1"}).status_code == 400
    assert client.post(preview, {"object_id": "987654"}).status_code == 404
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
    catch_all = ApprovalRule.objects.get(tool_pattern="*", group__isnull=True, arg_matchers={})
    assert client.post(f"{RULES}{rule.pk}/delete/", {"post": "yes"}).status_code == 302
    page = client.get(f"{RULES}{catch_all.pk}/delete/")
    # With no rule left the gate fails closed: the write would have been denied.
    assert page.context["rule_impact_state"] == "tightens"
    assert "1 of 1 recorded calls in the last 7 days would be decided differently." in page.content.decode()


GROUPS = "/admin/approvals/securitygroup/"


def group_form(group, *, users: list[str], rules: list[dict[str, str]], **extra: str) -> dict[str, object]:
    """The group page's POST: its fields and its inline rules (existing ones carry their id)."""
    existing = list(group.rules.order_by("pk")) if group is not None else []
    data: dict[str, object] = {"name": group.name if group is not None else "ops", "description": "", "users": users,
                               "rules-TOTAL_FORMS": str(len(rules)), "rules-INITIAL_FORMS": str(len(existing)),
                               "rules-MIN_NUM_FORMS": "0", "rules-MAX_NUM_FORMS": "1000", **extra}
    for index, rule in enumerate(rules):
        row = {"priority": "10", "arg_matchers": "{}", "approval_ttl": "", "enabled": "on", "note": "", **rule}
        if index < len(existing):
            row.setdefault("id", str(existing[index].pk))
            row["group"] = str(group.pk)
        data.update({f"rules-{index}-{key}": value for key, value in row.items()})
    return data


def test_the_group_page_previews_members_and_inline_rules_and_confirms_a_looser_gate(
        client, alice, troubleshooting, script) -> None:
    from approvals.models import SecurityGroup
    from approvals.rules.services import approval_rule_save, security_group_save
    from audit.actors import Actor

    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")  # alice's write: require
    client.force_login(make_user("root", superuser=True))

    # A new group holding alice, with a rule that denies writes: the preview says it tightens.
    new = client.post(f"{GROUPS}impact-preview/", group_form(None, users=[str(alice.pk)], rules=[
        {"tool_pattern": "write_file", "action": "deny"}])).json()
    assert new["state"] == "tightens" and new["impact"]["transitions"] == {"approval → denied": 1}
    assert not SecurityGroup.objects.exists()  # a preview saves nothing

    ops = security_group_save(actor=Actor.system("test"), group=SecurityGroup(name="ops"), changed=["created"],
                              users=[alice], agents=[])
    approval_rule_save(actor=Actor.system("test"), rule=ApprovalRule(group=ops, tool_pattern="write_file",
                                                                     action="deny", priority=10), changed=["created"])
    # Taking alice out of the group would have let her write through with an approval again.
    loosen = group_form(ops, users=[], rules=[{"tool_pattern": "write_file", "action": "deny"}])
    preview = client.post(f"{GROUPS}impact-preview/", {**loosen, "object_id": str(ops.pk)}).json()
    assert preview["state"] == "loosens"
    assert preview["text"] == ("This change would have let 1 call from 1 user run with less restriction in the last "
                               "7 days (1 denied → approval).")
    page = client.post(f"{GROUPS}{ops.pk}/change/", loosen)
    assert page.status_code == 200
    assert "Tick &#x27;Confirm a looser gate&#x27; and save again." in page.content.decode()
    assert list(ops.users.all()) == [alice]
    saved = client.post(f"{GROUPS}{ops.pk}/change/", {**loosen, "confirm_loosening": "on"})
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    assert list(ops.users.all()) == []
    notes = [str(m) for m in get_messages(saved.wsgi_request)]
    assert any(n.startswith("Impact on recorded calls: 1 of 1 recorded calls in the last 7 days") for n in notes)
    # Deleting the inline rule of a group nobody is in changes nothing: it saves at once.
    assert client.post(f"{GROUPS}{ops.pk}/change/", group_form(ops, users=[], rules=[
        {"tool_pattern": "write_file", "action": "deny", "DELETE": "on"}])).status_code == 302
    assert not ops.rules.exists()
