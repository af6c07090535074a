"""The approval decision page (issue 13): context and the rule's explain trace on top, the diff, a
sticky decide bar; deciding lands on the next pending item. Rules: test a call, never-wins, defaults."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRule, ApprovalStatus, PendingApproval
from tests.approvals.test_approvals_admin import PENDING, RULES, WRITE, page_messages, park_writes
from tests.conftest import make_user

flow = pytest.mark.django_db(transaction=True)


@pytest.fixture
def root(db: None):
    return make_user("root", superuser=True)


@flow
@pytest.mark.db_sensitive
def test_deciding_lands_on_the_next_pending_item_then_on_the_empty_queue(client, alice, carol, troubleshooting,
                                                                         script):
    second = ("write_file", {"path": "reports/two.md", "content": "two\n"})
    first, other = park_writes(alice, troubleshooting, script, WRITE, second)
    client.force_login(carol)
    page = client.get(f"{PENDING}{first.pk}/change/").content.decode()
    assert 'id="approval-context"' in page and "troubleshooter" in page and "alice" in page
    assert "require &#x27;write_file&#x27; @100 (global)" in page and 'class="chosen"' in page
    assert 'class="skald-decide"' in page and '<span class="diff-add">+pool exhausted</span>' in page

    queue = client.get(PENDING)
    columns = [column["text"] for column in queue.context["result_headers"]]
    assert "what it touches" in columns and "run" in columns
    assert "resolved by" not in columns and "reason" not in columns  # the inbox: nothing is resolved yet
    assert '<code class="skald-key-arg">reports/findings.md</code>' in queue.content.decode()
    assert "resolved by" in [c["text"] for c in client.get(PENDING, {"state": "all"}).context["result_headers"]]

    moved = client.post(f"{PENDING}{first.pk}/resolve/", {"_approve": "Approve", "reason": "ok"})
    assert moved.status_code == 302 and moved["Location"] == f"{PENDING}{other.pk}/change/"
    [said] = page_messages(moved)
    assert said.startswith("Approved write_file (reports/findings.md) in console session #")
    assert said.endswith("Now showing the next call waiting: write_file (reports/two.md) in console session "
                         f"#{other.session_id}.")
    done = client.post(f"{PENDING}{other.pk}/resolve/", {"_reject": "Reject", "reason": "not two"})
    assert done["Location"] == PENDING and any("Nothing else is waiting" in m for m in page_messages(done))
    assert list(PendingApproval.objects.values_list("status", flat=True).order_by("pk")) == [
        ApprovalStatus.APPROVED, ApprovalStatus.REJECTED]
    queue = client.get(PENDING)
    assert list(queue.context["cl"].result_list) == []  # resolved items leave the pending list


@pytest.mark.django_db
def test_a_superuser_tests_a_call_and_reads_the_trace(client, root, alice):
    client.force_login(root)
    page = client.get(f"{RULES}test-a-call/", {"user": "alice", "tool": "write_file", "args": '{"path": "x"}'})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="explain-result"' in html
    assert "global: rule" in html and "matches — decides its set" in html
    refused = client.get(f"{RULES}test-a-call/", {"tool": "write_file", "args": "[1]"}).content.decode()
    assert "must be a JSON object" in refused and "Choose a user or an agent" in refused


@pytest.mark.django_db
def test_the_rule_list_warns_of_a_rule_that_can_never_win_and_new_rules_start_at_100(client, root):
    dead = ApprovalRule.objects.create(tool_pattern="write_file", action="allow", priority=500, note="too late")
    client.force_login(root)
    html = client.get(RULES).content.decode()
    assert 'id="never-wins"' in html and f"rule #{dead.pk}" in html and 'id="rule-precedence"' in html
    add = client.get(f"{RULES}add/").content.decode()
    assert 'name="priority" value="100"' in add


@pytest.mark.django_db
def test_an_approver_sees_no_link_to_a_page_they_cannot_open(client, carol):
    make_user("zed", "operator")
    client.force_login(carol)
    home = client.get("/admin/").content.decode()
    assert 'id="panel-approvals"' in home and 'id="panel-cases"' not in home
    assert "/admin/approvals/approvalrule/" not in home
