"""Revocation across processes on the real stack (issue 17): a user deactivated from another process
(a management shell, as an administrator's tooling would) loses their refresh token and their open
session websocket at once — the close reaches daphne through the channel layer, here the embedded
profile's (no Redis)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from tests.e2e.stack import BASE_DIR, PASSWORD, Launch

pytestmark = pytest.mark.e2e

WAIT = 30.0  # a hang guard, not a time assertion
DEACTIVATE = ("from django.contrib.auth.models import User; from audit.actors import Actor; "
              "from skald.identity.users import user_deactivate; "
              "user_deactivate(actor=Actor.system('manage'), user=User.objects.get(username='operator'))")


def test_deactivating_a_user_from_another_process_closes_their_websocket_and_refuses_their_refresh(
        launch_stack: Launch) -> None:
    stack = launch_stack()
    with stack.http() as client:
        pair = client.post("/api/auth/token/", json={"username": "operator", "password": PASSWORD})
    assert pair.status_code == 200, pair.text
    access, refresh = pair.json()["access"], pair.json()["refresh"]
    session = stack.api("operator").create_session()
    url = f"{stack.ws_url}/ws/sessions/{session['id']}/?token={access}&after=0"

    async def scenario() -> int | None:
        async with connect(url, origin=Origin(stack.base_url)) as ws:
            await ws.send('{"type": "ping"}')  # the stream is open: it answers
            while '"unknown_message"' not in str(await asyncio.wait_for(ws.recv(), WAIT)):
                pass
            env = {k: v for k, v in os.environ.items() if not k.startswith("SKALD_") and k not in
                   {"DATABASE_URL", "REDIS_URL"}}
            env.update({"SKALD_VAR_DIR": str(stack.var_dir), "DJANGO_SETTINGS_MODULE": "skald.settings"})
            done = await asyncio.to_thread(subprocess.run, [sys.executable, "manage.py", "shell", "-c", DEACTIVATE],
                                           cwd=BASE_DIR, env=env, capture_output=True, timeout=120)
            assert done.returncode == 0, done.stderr.decode(errors="replace")
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), WAIT)
            except ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd else None
        return None

    assert asyncio.run(scenario()) == 4401
    with stack.http() as client:
        assert client.post("/api/auth/token/refresh/", json={"refresh": refresh}).status_code == 401
        assert client.get("/api/sessions/", headers={"Authorization": f"Bearer {access}"}).status_code == 401
