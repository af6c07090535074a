"""User accounts through the audited services (issue 26): the admin's user page deactivates, sets
roles and deletes through ``skald.identity.users``, each change audited with its revocation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from rest_framework.test import APIClient

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.identity.provider_users import provider_user_create
from skald.identity.users import user_deactivate, user_reactivate, user_roles_set
from tests.conftest import PASSWORD, make_user

pytestmark = pytest.mark.django_db
ADMIN = Actor.system("test-admin")


def payloads(kind: AuditKind) -> list[dict[str, Any]]:
    return [json.loads(row.payload) for row in AuditEvent.objects.filter(kind=kind).order_by("seq")]


def refresh_token(username: str) -> str:
    answer = APIClient().post("/api/auth/token/", {"username": username, "password": PASSWORD}, format="json")
    assert answer.status_code == 200, answer.content
    return str(answer.json()["refresh"])


def refreshes(token: str) -> bool:
    return APIClient().post("/api/auth/token/refresh/", {"refresh": token}, format="json").status_code == 200


def admin_browser() -> Client:
    make_user("root", superuser=True)
    browser = Client()
    assert browser.post("/admin/login/?next=/admin/", {"username": "root", "password": PASSWORD}).status_code == 302
    return browser


def change_form(user: User, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "username": user.username, "first_name": "", "last_name": "", "email": "",
        "is_active": "on", "is_staff": "", "groups": [str(pk) for pk in user.groups.values_list("pk", flat=True)],
        "user_permissions": [], "last_login_0": "", "last_login_1": "",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"), "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }
    data.update(changes)
    return {key: value for key, value in data.items() if value != ""}


def test_unticking_active_in_the_admin_deactivates_audits_and_revokes() -> None:
    erin = make_user("erin", "operator")
    token = refresh_token("erin")
    browser = admin_browser()
    answer = browser.post(f"/admin/auth/user/{erin.pk}/change/", change_form(erin, is_active=""))
    assert answer.status_code == 302, answer.content
    erin.refresh_from_db()
    assert not erin.is_active and not refreshes(token)
    (row,) = AuditEvent.objects.filter(kind=AuditKind.USER_DEACTIVATED)
    assert (row.actor_type, row.actor_id) == ("user", str(User.objects.get(username="root").pk))
    assert [p["reason"] for p in payloads(AuditKind.TOKENS_REVOKED)] == ["deactivated"]


def test_taking_the_last_role_in_the_admin_revokes_and_one_role_of_two_does_not() -> None:
    erin = make_user("erin", "operator", "approver")
    token = refresh_token("erin")
    browser = admin_browser()
    operator = str(Group.objects.get(name="operator").pk)
    assert browser.post(f"/admin/auth/user/{erin.pk}/change/", change_form(erin, groups=[operator])).status_code == 302
    assert refreshes(token)
    assert payloads(AuditKind.ROLES_SET)[-1]["groups_removed"] == ["approver"]
    token = refresh_token("erin")
    assert browser.post(f"/admin/auth/user/{erin.pk}/change/", change_form(erin, groups=[])).status_code == 302
    assert not refreshes(token)
    assert [p["reason"] for p in payloads(AuditKind.TOKENS_REVOKED)] == ["last_role_removed"]


def test_the_services_audit_only_a_change() -> None:
    erin = make_user("erin", "operator")
    assert not user_roles_set(actor=ADMIN, user=erin, groups=erin.groups.all())
    assert user_deactivate(actor=ADMIN, user=erin) and not user_deactivate(actor=ADMIN, user=erin)
    assert user_reactivate(actor=ADMIN, user=erin) and not user_reactivate(actor=ADMIN, user=erin)
    kinds = list(AuditEvent.objects.filter(subject_type="identity.account").values_list("kind", flat=True))
    assert kinds == [AuditKind.USER_DEACTIVATED, AuditKind.TOKENS_REVOKED, AuditKind.USER_REACTIVATED]
    erin.refresh_from_db()
    assert erin.is_active


def test_deleting_a_user_in_the_admin_is_audited() -> None:
    erin = make_user("erin", "operator")
    browser = admin_browser()
    assert browser.post(f"/admin/auth/user/{erin.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not User.objects.filter(username="erin").exists()
    assert payloads(AuditKind.USER_DELETED) == [{"user_id": erin.pk}]


def test_a_provider_user_is_created_with_an_audit_row() -> None:
    user = provider_user_create(issuer="https://idp.example", subject="s-1", claims={"preferred_username": "olga"})
    assert payloads(AuditKind.USER_CREATED) == [{"user_id": user.pk, "issuer": "https://idp.example",
                                                 "subject": "s-1"}]
