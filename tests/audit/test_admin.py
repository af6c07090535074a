"""The audit log in the admin: read-only for everyone, verify for readers, record-head for superusers."""

from __future__ import annotations

import pytest
from django.contrib.admin.sites import site
from django.db import connection
from django.test import RequestFactory

from audit.kinds import AuditKind
from audit.models import AuditEvent, ChainHead
from tests.audit.forge import tamper
from tests.conftest import make_user

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/audit/auditevent/"
VERIFY = CHANGELIST + "verify/"
RECORD_HEAD = CHANGELIST + "record-head/"


@pytest.fixture
def root(db: None):
    return make_user("root", superuser=True)


def test_nobody_may_add_change_or_delete_audit_rows_not_even_a_superuser(root):
    request = RequestFactory().get(CHANGELIST)
    request.user = root
    for model in (AuditEvent, ChainHead):
        model_admin = site._registry[model]
        assert model_admin.has_view_permission(request)
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)


def test_the_detail_page_is_read_only_and_writes_are_refused(client, root, audit_chain):
    event = audit_chain(3)[1]
    client.force_login(root)
    page = client.get(f"{CHANGELIST}{event.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert event.hash.encode() in page.content
    assert client.post(f"{CHANGELIST}{event.pk}/change/", {"payload": "{}"}).status_code == 403
    assert client.post(f"{CHANGELIST}{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get(CHANGELIST + "add/").status_code == 403
    assert AuditEvent.objects.get(pk=event.pk).payload == event.payload


def test_an_auditor_browses_and_filters_the_log(client, dave, audit_chain):
    audit_chain(12)
    client.force_login(dave)
    page = client.get(CHANGELIST)
    assert page.status_code == 200
    assert b"Verify chain" in page.content and b"Record head" not in page.content
    by_kind = client.get(CHANGELIST, {"kind__exact": int(AuditKind.RUN_LAUNCHED)})
    assert {e.kind for e in by_kind.context["cl"].result_list} == {AuditKind.RUN_LAUNCHED}
    by_actor = client.get(CHANGELIST, {"actor_type__exact": "agent", "actor_id": "troubleshooter"})
    assert {e.actor_id for e in by_actor.context["cl"].result_list} == {"troubleshooter"}
    by_subject = client.get(CHANGELIST, {"subject_type": "skald.run", "subject_id": "2"})
    assert sorted(e.seq for e in by_subject.context["cl"].result_list) == [6, 7, 8]
    assert client.get("/admin/audit/chainhead/").status_code == 200


def test_an_outsider_cannot_see_the_log(client, charlie):
    client.force_login(charlie)
    assert client.get(CHANGELIST).status_code == 302  # not staff: back to the login page
    assert client.get(VERIFY).status_code == 302


def test_the_verify_view_shows_intact_and_broken_chains(client, dave, audit_chain):
    audit_chain(40, head_at=40)
    client.force_login(dave)
    page = client.get(VERIFY)
    assert page.status_code == 200 and page.context["report"].ok
    assert b'data-ok="true"' in page.content and b"40 rows verified" in page.content
    with connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET actor_id = 'mallory' WHERE seq = 33")
    page = client.get(VERIFY)
    assert b'data-ok="false"' in page.content
    assert b"Chain broken at seq 33:" in page.content


def test_a_superuser_records_a_head_through_the_service(client, root, audit_chain):
    audit_chain(5)
    client.force_login(root)
    assert b"Record head" in client.get(CHANGELIST).content
    response = client.post(RECORD_HEAD)
    assert response.status_code == 302 and response.url == CHANGELIST
    event = AuditEvent.objects.get(seq=6)
    assert (event.kind, event.actor_type, event.actor_id) == (
        AuditKind.CHAIN_HEAD_RECORDED, "user", str(root.pk)
    )
    assert ChainHead.objects.get().seq == 6
    assert client.get(RECORD_HEAD).status_code == 405  # a write is never a GET


def test_an_auditor_cannot_record_a_head(client, dave):
    client.force_login(dave)
    assert client.post(RECORD_HEAD).status_code == 403
    assert not ChainHead.objects.exists()


def test_the_log_still_renders_a_row_tampered_to_an_unknown_kind(client, dave, audit_chain):
    audit_chain(3)
    tamper(2, "kind", 999)
    client.force_login(dave)
    page = client.get(CHANGELIST)
    assert page.status_code == 200 and b"unknown kind 999" in page.content
    assert b"Chain broken at seq 2:" in client.get(VERIFY).content


# --- a log people can read (issue 13) -------------------------------------------------------------

def _appended(actor_user, kind: AuditKind, subject_type: str, subject_id: str, payload: dict) -> None:
    from audit.actors import Actor
    from audit.services import audit_append

    audit_append(actor=Actor.user(actor_user), kind=kind, subject_type=subject_type, subject_id=subject_id,
                 payload=payload)


def test_it_shows_names_a_summary_and_finds_rows_by_user_name_kind_words_and_partial_id(client, dave, carol):
    _appended(carol, AuditKind.APPROVAL_RESOLVED, "approval", "5f0c9a1e-77", {"tool": "write_file",
                                                                               "decision": "approve"})
    _appended(dave, AuditKind.CHAIN_HEAD_RECORDED, "system", "chain", {"seq": 1})
    client.force_login(dave)
    page = client.get(CHANGELIST).content.decode()
    assert "<td class=\"field-actor\">carol</td>" in page
    assert "approval resolved — tool=write_file, decision=approve" in page
    assert 'id="chain-head-status"' in page and "No head has been recorded yet" in page

    def found(term: str) -> set[str]:
        return {row.actor_name for row in client.get(CHANGELIST, {"q": term}).context["cl"].result_list}

    assert found("carol") == {"carol"}
    assert found("approval resolved") == {"carol"}
    assert found("5f0c9a") == {"carol"}
    assert found("write_file") == {"carol"}


def test_it_finds_rows_by_a_hash_prefix_and_by_a_subject_as_pages_name_it(client, dave, carol):
    _appended(carol, AuditKind.APPROVAL_RESOLVED, "run", "1", {"decision": "approve"})
    _appended(carol, AuditKind.APPROVAL_RESOLVED, "run", "12", {"decision": "approve"})
    _appended(dave, AuditKind.CHAIN_HEAD_RECORDED, "approval_rule", "1", {"seq": 1})
    first, second, third = AuditEvent.objects.order_by("seq")
    client.force_login(dave)

    def found(term: str) -> list[int]:
        return sorted(row.seq for row in client.get(CHANGELIST, {"q": term}).context["cl"].result_list)

    assert found("run #1") == [first.seq] and found("Run 12") == [second.seq]
    assert found("approval rule #1") == [third.seq]
    assert found(second.hash[:8]) == [second.seq, third.seq]  # its own hash, and the next row's previous
    assert found(third.hash[:10]) == [third.seq]


def test_the_detail_page_links_subject_and_previous_row_names_the_actor_and_pretty_prints(client, root, carol):
    _appended(carol, AuditKind.APPROVAL_RESOLVED, "run", "1", {"decision": "approve"})
    _appended(carol, AuditKind.APPROVAL_RESOLVED, "approval_rule", "7", {"tool": "write_file", "decision": "reject"})
    first, second = AuditEvent.objects.order_by("seq")
    client.force_login(root)
    page = client.get(f"{CHANGELIST}{second.pk}/change/").content.decode()
    assert '<a href="/admin/approvals/approvalrule/7/change/">approval rule #7</a>' in page
    assert f'<a href="{CHANGELIST}{first.pk}/change/"><code class="skald-hash">{first.hash}</code></a>' in page
    assert '<div class="readonly">carol</div>' in page
    assert '<pre class="skald-payload">{\n  &quot;decision&quot;: &quot;reject&quot;,\n' in page
    assert second.time.strftime("%Y-%m-%d %H:%M:%S UTC") in page  # the one date format


def test_it_exports_the_filtered_rows_as_csv_and_jsonl(client, dave, carol):
    import csv
    import io
    import json

    _appended(carol, AuditKind.APPROVAL_RESOLVED, "approval", "a1", {"tool": "write_file"})
    _appended(dave, AuditKind.CHAIN_HEAD_RECORDED, "system", "chain", {"seq": 1})
    client.force_login(dave)
    jsonl = client.get(CHANGELIST + "export.jsonl", {"q": "carol"})
    assert jsonl["Content-Type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in b"".join(jsonl.streaming_content).decode().splitlines()]
    assert [(r["actor_name"], r["kind_label"]) for r in rows] == [("carol", "approvals.approval.resolved")]
    exported = client.get(CHANGELIST + "export.csv")
    table = list(csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert [r["actor_name"] for r in table] == ["carol", "dave"] and table[0]["hash"]
