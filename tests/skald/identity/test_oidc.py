"""Single sign-on against a real OpenID Connect provider on loopback (issue 17): the admin and
console sign-in (code + PKCE), the group mapping applied and changed at the next sign-in, API calls
with a provider-issued token, and refusal of a token from another issuer or with a bad signature."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from authlib.integrations.requests_client import OAuth2Session
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client
from joserfc import jwt
from joserfc.jwk import RSAKey
from rest_framework.test import APIClient

from approvals.models import SecurityGroup
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.core.roles import roles_ensure, user_roles
from skald.identity.models import ProviderGroupMapping
from tests.skald.identity.provider import CLIENT_ID, CLIENT_SECRET, Provider

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def mapping(db: None) -> None:
    roles_ensure()
    oncall = SecurityGroup.objects.create(name="oncall")
    ProviderGroupMapping.objects.create(provider_group="sre", role="operator")
    ProviderGroupMapping.objects.create(provider_group="sre", security_group=oncall)
    ProviderGroupMapping.objects.create(provider_group="change-board", role="approver")
    ProviderGroupMapping.objects.create(provider_group="audit", role="auditor")


def provider_sign_in(client: Client, provider: Provider, username: str, next_url: str = "/console/") -> Any:
    """The browser's round trip, with the test client for Skald and httpx for the provider."""
    start = client.get(f"/oidc/authenticate/?next={next_url}")
    assert start.status_code == 302 and start["Location"].startswith(f"{provider.issuer}/authorize?")
    query = parse_qs(urlsplit(start["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"] and query["nonce"]
    with httpx.Client() as browser:
        assert browser.get(start["Location"]).status_code == 200  # the provider's sign-in form
        answer = browser.post(start["Location"], data={"username": username})
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["Location"])
    assert back.path == "/oidc/callback/"
    return client.get(f"{back.path}?{back.query}")


def payloads(kind: AuditKind) -> list[dict[str, Any]]:
    return [json.loads(row.payload) for row in AuditEvent.objects.filter(kind=kind).order_by("seq")]


def test_a_provider_user_signs_in_to_the_console_with_mapped_roles_that_follow_the_provider(sso: Provider) -> None:
    sso.person("olga", "sre", "unmapped")
    client = Client()
    done = provider_sign_in(client, sso, "olga")
    assert done.status_code == 302 and done["Location"] == "/console/", done.content
    console = client.get("/console/")
    assert console.status_code == 200 and b"olga" in console.content
    olga = User.objects.get(username="olga")
    assert user_roles(olga) == {"operator"} and olga.is_staff and not olga.has_usable_password()
    assert list(olga.security_groups.values_list("name", flat=True)) == ["oncall"]
    [signed_in] = payloads(AuditKind.SIGNED_IN)
    assert signed_in["method"] == "oidc" and signed_in["address"] == "127.0.0.1"
    [first] = payloads(AuditKind.ROLES_FROM_PROVIDER)
    assert first["roles_added"] == ["operator"] and first["provider_groups"] == ["sre", "unmapped"]

    # The provider moves olga from SRE to the change board: the next sign-in follows.
    sso.people["olga"].groups = ["change-board"]
    again = Client()
    assert provider_sign_in(again, sso, "olga", "/admin/")["Location"] == "/admin/"
    olga = User.objects.get(username="olga")
    assert user_roles(olga) == {"approver"} and not olga.security_groups.exists()
    changed = payloads(AuditKind.ROLES_FROM_PROVIDER)[-1]
    assert changed["roles_added"] == ["approver"] and changed["roles_removed"] == ["operator"]
    assert changed["security_groups_removed"] == [SecurityGroup.objects.get(name="oncall").pk]
    assert again.get("/admin/").status_code == 200
    assert User.objects.filter(username__startswith="olga").count() == 1  # matched by (issuer, sub)


def test_a_provider_account_never_takes_over_a_local_account_of_the_same_name(sso: Provider) -> None:
    local = User.objects.create_user("admin", password="local-only", is_superuser=True, is_staff=True)
    sso.person("admin", "audit")
    provider_sign_in(Client(), sso, "admin")
    created = User.objects.exclude(pk=local.pk).get(provider_identity__subject=sso.people["admin"].sub)
    assert created.username == "admin-2" and user_roles(created) == {"auditor"}
    assert not hasattr(User.objects.get(pk=local.pk), "provider_identity")


def test_a_tampered_callback_signs_nobody_in_and_is_audited(sso: Provider) -> None:
    client = Client()
    start = client.get("/oidc/authenticate/?next=/console/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    failed = client.get(f"/oidc/callback/?code=forged&state={state}")
    assert failed.status_code == 302 and failed["Location"] == "/admin/login/?sso=failed"
    assert "_auth_user_id" not in client.session
    [row] = payloads(AuditKind.SIGN_IN_FAILED)
    assert row["method"] == "oidc" and row["entrance"] == "oidc"


def provider_token(provider: Provider, username: str) -> str:
    """An access token from the provider's own token endpoint (authlib's OAuth 2 client, code + PKCE)."""
    redirect = "http://testserver/oidc/callback/"
    with OAuth2Session(CLIENT_ID, CLIENT_SECRET, scope="openid email", redirect_uri=redirect,
                      code_challenge_method="S256") as oauth:
        verifier = "v" * 64
        url, _ = oauth.create_authorization_url(f"{provider.issuer}/authorize", code_verifier=verifier,
                                                nonce="n-" + username)
        answer = httpx.post(url, data={"username": username})
        token = oauth.fetch_token(f"{provider.issuer}/token", authorization_response=answer.headers["Location"],
                                  code_verifier=verifier)
    return str(token["access_token"])


def api_get(token: str, path: str = "/api/sessions/") -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get(path)


def test_an_api_call_with_a_provider_issued_token(sso: Provider) -> None:
    sso.person("petra", "audit")
    token = provider_token(sso, "petra")
    assert api_get(token, "/api/audit/verify").status_code == 200  # an auditor, by the mapping
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.post("/api/sessions/", {"title": "x"}, format="json").status_code == 403  # auditors only read
    petra = User.objects.get(provider_identity__subject=sso.people["petra"].sub)
    assert user_roles(petra) == {"auditor"}


def test_tokens_from_another_issuer_or_with_a_bad_signature_are_refused(sso: Provider) -> None:
    sso.person("petra", "audit")
    genuine = provider_token(sso, "petra")
    assert api_get(genuine, "/api/audit/verify").status_code == 200

    foreign = Provider(redirect_uris=["http://testserver/oidc/callback/"]).start()
    try:
        foreign.person("petra", "audit")
        assert api_get(provider_token(foreign, "petra"), "/api/audit/verify").status_code == 401
    finally:
        foreign.stop()

    # The same claims and key id, signed by a key that is not the provider's.
    header, claims = jwt.decode(genuine, sso.key).header, jwt.decode(genuine, sso.key).claims
    impostor = RSAKey.generate_key(2048, parameters={"kid": header["kid"]}, private=True)
    forged = jwt.encode(header, {**claims, "groups": ["audit", "sre"]}, impostor)
    refused = api_get(forged, "/api/audit/verify")
    assert refused.status_code == 401 and refused.json()["code"] == "token_not_valid"


def test_a_partial_provider_profile_refuses_to_start(settings: Any) -> None:
    settings.SKALD_OIDC_ENV = {"SKALD_OIDC_ISSUER": "https://idp.example.com"}
    with pytest.raises(SystemCheckError, match=r"skald\.E010"):
        call_command("check")
    settings.SKALD_OIDC_ENV = {}
    call_command("check")


def test_the_mapping_is_edited_in_the_admin_and_every_change_is_audited() -> None:
    root = User.objects.create_superuser("root", password="x" * 12)
    admin = Client()
    admin.force_login(root)
    added = admin.post("/admin/skald/providergroupmapping/add/", {"provider_group": "reviewers", "role": "reviewer",
                                                                  "security_group": ""})
    assert added.status_code == 302, added.content
    mapping = ProviderGroupMapping.objects.get(provider_group="reviewers")
    changed = admin.post(f"/admin/skald/providergroupmapping/{mapping.pk}/change/",
                         {"provider_group": "reviewers", "role": "auditor", "security_group": ""})
    assert changed.status_code == 302
    deleted = admin.post(f"/admin/skald/providergroupmapping/{mapping.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302 and not ProviderGroupMapping.objects.filter(pk=mapping.pk).exists()
    rows = AuditEvent.objects.filter(kind=AuditKind.GROUP_MAPPING_CHANGED).order_by("seq")
    assert [(json.loads(r.payload)["change"], json.loads(r.payload)["role"], r.actor_id) for r in rows] == [
        ("created", "reviewer", str(root.pk)), ("updated", "auditor", str(root.pk)),
        ("deleted", "auditor", str(root.pk))]
    empty = admin.post("/admin/skald/providergroupmapping/add/", {"provider_group": "x", "role": "",
                                                                  "security_group": ""})
    assert empty.status_code == 200 and not ProviderGroupMapping.objects.filter(provider_group="x").exists()


def test_a_deactivated_provider_users_browser_session_ends(sso: Provider) -> None:
    sso.person("olga", "sre")
    client = Client()
    provider_sign_in(client, sso, "olga")
    assert client.get("/console/").status_code == 200
    User.objects.filter(username="olga").update(is_active=False)
    assert client.get("/console/").status_code == 302  # back to the login page
