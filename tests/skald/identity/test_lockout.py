"""Brute-force protection on every password entrance (issue 17): 20 wrong passwords lock the
account from that address at the token endpoint, the admin login and the console's login, 100 from
anywhere lock the account (issue 35: an address alone is never locked, so one person cannot lock an
office out); the right password then fails until an admin lifts the lock; a person near the limit
is warned; every attempt leaves an audit row; the answer never says whether the name or the
password was wrong."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.conftest import PASSWORD, make_user

pytestmark = pytest.mark.django_db

LIMIT = 20
ACCOUNT_LIMIT = 100


class Row:
    def __init__(self, event: AuditEvent) -> None:
        self.actor_id, self.payload = event.actor_id, json.loads(event.payload)


def rows(kind: AuditKind, **payload: Any) -> list[Row]:
    found = [Row(event) for event in AuditEvent.objects.filter(kind=kind).order_by("seq")]
    return [row for row in found if all(row.payload.get(k) == v for k, v in payload.items())]


def token_attempt(username: str, password: str, address: str = "10.0.0.1") -> Any:
    return APIClient().post("/api/auth/token/", {"username": username, "password": password}, format="json",
                            REMOTE_ADDR=address)


def admin_attempt(client: Client, username: str, password: str, next_url: str = "/admin/") -> Any:
    return client.post(f"/admin/login/?next={next_url}", {"username": username, "password": password,
                                                          "next": next_url}, REMOTE_ADDR="10.0.0.2")


@pytest.fixture
def erin(db: None) -> User:
    return make_user("erin", "operator", superuser=False)


@pytest.fixture
def root(db: None) -> User:
    return make_user("root", superuser=True)


def test_a_wrong_password_and_an_unknown_account_get_the_same_answer(erin: User) -> None:
    wrong_password = token_attempt("erin", "not it")
    unknown_user = token_attempt("nobody-here", "not it")
    assert wrong_password.status_code == unknown_user.status_code == 401
    assert wrong_password.json() == unknown_user.json()
    failures = rows(AuditKind.SIGN_IN_FAILED)
    assert [(row.payload["username"], row.payload["entrance"], row.payload["address"]) for row in failures] == [
        ("erin", "api", "10.0.0.1"), ("nobody-here", "api", "10.0.0.1")]
    assert all("not it" not in json.dumps(row.payload) for row in failures)  # the secret tried is never kept


def test_twenty_wrong_passwords_lock_the_token_endpoint_until_an_admin_lifts_it(erin: User, root: User) -> None:
    for _ in range(LIMIT - 1):
        assert token_attempt("erin", "guess").status_code == 401
    assert rows(AuditKind.LOCKED_OUT) == []
    locking = token_attempt("erin", "guess")
    assert locking.status_code == 429 and locking.json()["code"] == "sign_in_locked"
    [lockout] = rows(AuditKind.LOCKED_OUT)
    assert lockout.payload["username"] == "erin" and lockout.payload["failures"] == LIMIT

    # The right password fails now from that address: the pair is locked, and says nothing more.
    refused = token_attempt("erin", PASSWORD, "10.0.0.1")
    assert refused.status_code == 429, refused.content
    assert refused.json()["code"] == "sign_in_locked"
    assert len(rows(AuditKind.SIGN_IN_FAILED, username="erin")) == LIMIT + 1
    assert rows(AuditKind.SIGNED_IN) == []

    # An admin lifts it in the admin (the lockout action on the access attempts), audited.
    admin = Client()
    admin.force_login(root)
    attempts = list(AccessAttempt.objects.filter(username="erin").values_list("pk", flat=True))
    lifted = admin.post("/admin/axes/accessattempt/", {"action": "lift_lockout", "_selected_action": attempts})
    assert lifted.status_code == 302
    assert not AccessAttempt.objects.filter(username="erin").exists()
    assert {row.actor_id for row in rows(AuditKind.LOCKOUT_LIFTED, username="erin")} == {str(root.pk)}

    signed_in = token_attempt("erin", PASSWORD)
    assert signed_in.status_code == 200 and "access" in signed_in.json()
    [row] = [row for row in rows(AuditKind.SIGNED_IN) if row.actor_id == str(erin.pk)]
    assert row.payload == {"method": "password", "entrance": "api", "address": "10.0.0.1"}


@pytest.mark.parametrize("next_url,entrance", [("/admin/", "admin"), ("/console/", "console")])
def test_twenty_wrong_passwords_lock_the_admin_and_console_login(erin: User, next_url: str, entrance: str) -> None:
    client = Client()
    for _ in range(LIMIT - 1):
        page = admin_attempt(client, "erin", "guess", next_url)
        assert page.status_code == 200 and b"Please enter the correct username and password" in page.content
    locked = admin_attempt(client, "erin", "guess", next_url)
    assert locked.status_code == 429 and b"Sign-in locked" in locked.content
    right = admin_attempt(client, "erin", PASSWORD, next_url)
    assert right.status_code == 429 and b"Sign-in locked" in right.content
    assert "_auth_user_id" not in client.session
    assert {row.payload["entrance"] for row in rows(AuditKind.SIGN_IN_FAILED)} == {entrance}
    [lockout] = rows(AuditKind.LOCKED_OUT)
    assert lockout.payload["entrance"] == entrance and lockout.payload["address"] == "10.0.0.2"


def test_a_lock_on_one_entrance_holds_on_the_others(erin: User) -> None:
    for _ in range(LIMIT):
        token_attempt("erin", "guess", "10.0.0.2")
    page = admin_attempt(Client(), "erin", PASSWORD, "/console/")
    assert page.status_code == 429


def test_an_admin_sign_in_and_a_refresh_are_audited(erin: User) -> None:
    client = Client()
    signed_in = admin_attempt(client, "erin", PASSWORD, "/console/")
    assert signed_in.status_code == 302 and signed_in["Location"] == "/console/"
    [row] = rows(AuditKind.SIGNED_IN)
    assert row.payload == {"method": "password", "entrance": "console", "address": "10.0.0.2"}

    pair = token_attempt("erin", PASSWORD).json()
    refreshed = APIClient().post("/api/auth/token/refresh/", {"refresh": pair["refresh"]}, format="json",
                                 REMOTE_ADDR="10.0.0.3")
    assert refreshed.status_code == 200
    [refresh_row] = rows(AuditKind.TOKEN_REFRESHED)
    assert refresh_row.actor_id == str(erin.pk) and refresh_row.payload["address"] == "10.0.0.3"


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(erin: User, settings: Any) -> None:
    settings.SKALD_CLIENT_IP_HEADER = "X-Forwarded-For"
    settings.SKALD_TRUSTED_PROXY_COUNT = 1
    for forged in range(LIMIT):  # a client writing a new address each time is still one client
        APIClient().post("/api/auth/token/", {"username": "erin", "password": "x"}, format="json",
                         REMOTE_ADDR="10.0.0.254", HTTP_X_FORWARDED_FOR=f"192.0.2.{forged}, 198.51.100.7")
    assert {row.payload["address"] for row in rows(AuditKind.SIGN_IN_FAILED)} == {"198.51.100.7"}
    locked = APIClient().post("/api/auth/token/", {"username": "erin", "password": PASSWORD}, format="json",
                              REMOTE_ADDR="10.0.0.254", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert locked.status_code == 429  # erin from that client is locked
    other_client = APIClient().post("/api/auth/token/", {"username": "erin", "password": PASSWORD}, format="json",
                                    REMOTE_ADDR="10.0.0.254", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert other_client.status_code == 200  # another client behind the same proxy is not


def test_one_persons_failures_lock_nobody_else_behind_the_same_address(erin: User) -> None:
    """Issue 35: twenty failures for one account lock that account from that address only; a
    colleague behind the same NAT signs in, and so does the account from elsewhere."""
    make_user("frank", "operator", superuser=False)
    for _ in range(LIMIT):
        token_attempt("erin", "guess", "10.0.0.7")
    assert token_attempt("erin", PASSWORD, "10.0.0.7").status_code == 429
    assert token_attempt("frank", PASSWORD, "10.0.0.7").status_code == 200
    assert token_attempt("erin", PASSWORD, "10.0.0.8").status_code == 200


def test_the_account_alone_locks_at_its_own_higher_limit(erin: User) -> None:
    """A guesser who changes addresses: a hundred failures from anywhere lock the account everywhere."""
    for attempt in range(ACCOUNT_LIMIT - 1):
        assert token_attempt("erin", "guess", f"10.1.{attempt // 10}.{attempt % 10}").status_code == 401
    assert token_attempt("erin", "guess", "10.2.0.1").status_code == 429  # the hundredth
    assert token_attempt("erin", PASSWORD, "10.3.0.1").status_code == 429
    assert token_attempt("erin", PASSWORD, "10.3.0.2").json()["code"] == "sign_in_locked"


def test_a_person_near_the_limit_is_warned_the_same_for_any_wrong_name_or_password(erin: User) -> None:
    for _ in range(LIMIT - 6):
        assert "attempts_left" not in token_attempt("erin", "guess").json()["extra"]
    near = token_attempt("erin", "guess").json()  # five left
    assert near["code"] == "no_active_account" and near["extra"] == {"attempts_left": 5}
    for _ in range(LIMIT - 1):
        token_attempt("nobody-here", "guess")
    assert token_attempt("nobody-here", "guess").status_code == 429  # an unknown name counts the same way

    client = Client()
    for _ in range(LIMIT - 2):
        admin_attempt(client, "frank-unknown", "guess")
    page = admin_attempt(client, "frank-unknown", "guess")  # the nineteenth: one left
    assert page.status_code == 200 and b"1 attempt left" in page.content


def test_the_lock_page_says_what_is_locked_and_how_it_is_lifted(erin: User) -> None:
    client = Client()
    for _ in range(LIMIT):
        admin_attempt(client, "erin", "guess")
    page = admin_attempt(client, "erin", PASSWORD)
    text = " ".join(page.content.decode().split())
    assert page.status_code == 429 and 'id="sign-in-locked"' in text and "skald-brand" in text  # Skald's layout
    assert "<strong>erin</strong> from this address is locked after 20 failed attempts" in text
    assert "manage.py lockout_lift --username erin" in text


def test_the_break_glass_command_lifts_a_lockout_and_is_audited(erin: User) -> None:
    for _ in range(LIMIT):
        token_attempt("erin", "guess")
    assert token_attempt("erin", PASSWORD).status_code == 429
    call_command("lockout_lift", "--username", "erin", stdout=io.StringIO())
    assert token_attempt("erin", PASSWORD).status_code == 200
    lifted = [row for row in AuditEvent.objects.filter(kind=AuditKind.LOCKOUT_LIFTED)]
    assert lifted and {(row.actor_type, row.actor_id) for row in lifted} == {("system", "manage")}
