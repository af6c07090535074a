"""Revocation (issue 17): signing out, deactivating a user or removing their last role stops their
refresh token and access token at once and closes their open websockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from rest_framework.test import APIClient, APIRequestFactory

from audit.actors import Actor
from loop.models import Session
from skald.agents.seed import seed_agents
from skald.asgi import application
from skald.identity.tokens import RevocableJWTAuthentication
from skald.identity.users import user_deactivate, user_roles_set
from skald.sessions import services
from tests.conftest import PASSWORD, make_user
from tests.skald.ws import refusal

ORIGIN = (b"origin", b"http://testserver")
WAIT = 10


def sign_in(username: str) -> dict[str, str]:
    answer = APIClient().post("/api/auth/token/", {"username": username, "password": PASSWORD}, format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()


def refresh(pair: dict[str, str]) -> Any:
    return APIClient().post("/api/auth/token/refresh/", {"refresh": pair["refresh"]}, format="json")


def call(pair: dict[str, str], path: str = "/api/sessions/") -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {pair['access']}")
    return client.get(path)


ADMIN = Actor.system("test-admin")


def deactivate(user: User) -> None:
    user_deactivate(actor=ADMIN, user=user)


def remove_role(user: User, role: str) -> None:
    user_roles_set(actor=ADMIN, user=user, groups=user.groups.exclude(name=role))


@pytest.mark.django_db
@pytest.mark.parametrize("revoke", [deactivate, lambda user: user_roles_set(actor=ADMIN, user=user, groups=[]),
                                    lambda user: remove_role(user, "operator")],
                         ids=["deactivated", "groups-cleared", "removed-from-the-role-side"])
def test_a_revoked_users_refresh_and_access_tokens_stop_at_once(revoke: Callable[[User], None]) -> None:
    erin = make_user("erin", "operator")
    pair = sign_in("erin")
    assert refresh(pair).status_code == 200 and call(pair).status_code == 200
    revoke(erin)
    assert refresh(pair).status_code == 401
    assert call(pair).status_code in {401, 403}
    assert call(pair).status_code == 401  # the token itself is refused, not only the role


@pytest.mark.django_db
def test_a_bearer_token_is_checked_against_the_users_token_version_in_the_one_user_query(
        django_assert_num_queries: Any) -> None:
    erin = make_user("erin", "operator")
    request = APIRequestFactory().get("/api/sessions/", HTTP_AUTHORIZATION=f"Bearer {sign_in('erin')['access']}")
    with django_assert_num_queries(1):  # the user and the version together, as every API request reads them
        user, _token = RevocableJWTAuthentication().authenticate(request)
    assert user == erin


@pytest.mark.django_db
def test_a_deleted_users_refresh_token_is_refused() -> None:
    erin = make_user("erin", "operator")
    pair = sign_in("erin")
    erin.delete()
    assert refresh(pair).status_code == 401 and call(pair).status_code == 401


@pytest.mark.django_db
def test_removing_one_of_two_roles_revokes_nothing() -> None:
    erin = make_user("erin", "operator", "approver")
    pair = sign_in("erin")
    remove_role(erin, "approver")
    assert refresh(pair).status_code == 200 and call(pair).status_code == 200
    remove_role(erin, "operator")
    assert refresh(pair).status_code == 401


@pytest.mark.django_db
def test_signing_out_revokes_every_token_and_a_new_sign_in_works() -> None:
    make_user("erin", "operator")
    first, second = sign_in("erin"), sign_in("erin")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {first['access']}")
    answer = client.post("/api/auth/sign-out/")
    assert answer.status_code == 200 and answer.json() == {"refresh_tokens_revoked": 2}
    for pair in (first, second):
        assert refresh(pair).status_code == 401 and call(pair).status_code == 401
    fresh = sign_in("erin")
    assert call(fresh).status_code == 200 and refresh(fresh).status_code == 200


@pytest.mark.django_db
def test_an_admin_logout_revokes_the_users_api_tokens() -> None:
    make_user("erin", "operator")
    pair = sign_in("erin")
    browser = Client()
    assert browser.post("/admin/login/?next=/admin/", {"username": "erin", "password": PASSWORD}).status_code == 302
    assert browser.post("/admin/logout/").status_code == 200
    assert refresh(pair).status_code == 401


# -- websockets ------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def close_consumer_connections() -> AsyncIterator[None]:
    yield
    await sync_to_async(connections.close_all)()


def _session_for(username: str, *roles: str) -> tuple[User, Session, dict[str, str]]:
    user = make_user(username, *roles)
    seed_agents()
    session = services.session_create(user=user, title="disk")
    return user, session, sign_in(username)


async def _open(session: Session, pair: dict[str, str]) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, f"/ws/sessions/{session.pk}/?after=0&token={pair['access']}",
                                   headers=[ORIGIN])
    connected, _ = await socket.connect(timeout=WAIT)
    assert connected
    return socket


async def _closed_with(socket: WebsocketCommunicator) -> int | None:
    while True:
        message = await socket.receive_output(timeout=WAIT)
        if message["type"] == "websocket.close":
            return message.get("code")


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["deactivated", "last_role_removed", "signed_out"])
async def test_a_revoked_users_open_websockets_close(how: str, close_consumer_connections: None) -> None:
    user, session, pair = await sync_to_async(_session_for)("erin", "operator")
    _, _, other_pair = await sync_to_async(_session_for)("frank", "operator")
    first, second = await _open(session, pair), await _open(session, pair)
    other_session = await sync_to_async(lambda: Session.objects.exclude(pk=session.pk).get())()
    bystander = await _open(other_session, other_pair)

    if how == "deactivated":
        await sync_to_async(deactivate)(user)
    elif how == "last_role_removed":
        await sync_to_async(remove_role)(user, "operator")
    else:
        await sync_to_async(lambda: APIClient(HTTP_AUTHORIZATION=f"Bearer {pair['access']}")
                            .post("/api/auth/sign-out/"))()

    assert await _closed_with(first) == 4401
    assert await _closed_with(second) == 4401
    await bystander.send_json_to({"type": "ping"})  # another user's stream goes on and answers
    while (answer := await bystander.receive_json_from(timeout=WAIT)).get("type") != "error":
        pass
    assert answer["code"] == "unknown_message"
    await bystander.disconnect()

    refused = WebsocketCommunicator(application, f"/ws/sessions/{session.pk}/?after=0&token={pair['access']}",
                                    headers=[ORIGIN])
    assert await refusal(refused, timeout=WAIT) == 4401
