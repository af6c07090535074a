"""The embedded channel layer carries a group message from another process to this one's
consumers (a real second Python process, real Unix datagram sockets)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skald.core.channel_layer import LocalFanoutChannelLayer

SENDER = textwrap.dedent("""
    import asyncio, sys
    import django
    django.setup()
    from django.db import connection
    connection.settings_dict["NAME"] = sys.argv[2]
    from skald.core.channel_layer import LocalFanoutChannelLayer
    layer = LocalFanoutChannelLayer(directory=sys.argv[1])
    message = {"type": "session.delta", "payload": {"text": "hel"}}
    if sys.argv[3:] == ["now"]:  # a worker's way: no event loop, no consumers of its own
        assert layer.group_send_now("session.7", message)
    else:
        asyncio.run(layer.group_send("session.7", message))
""")


def _send_from_another_process(base: Path, database: str, how: str = "loop") -> None:
    done = subprocess.run([sys.executable, "-c", SENDER, str(base), database, how], capture_output=True, text=True,
                          timeout=60, env={"DJANGO_SETTINGS_MODULE": "skald.settings", "PATH": "/usr/bin:/bin",
                                           "SKALD_VAR_DIR": str(base)}, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["loop", "now"])
def test_it_delivers_a_group_message_sent_by_another_process(tmp_path: Path, how: str) -> None:
    from django.db import connection

    layer = LocalFanoutChannelLayer(directory=str(tmp_path))

    async def scenario() -> dict:
        channel = await layer.new_channel()
        await layer.group_add("session.7", channel)
        await asyncio.get_running_loop().run_in_executor(
            None, _send_from_another_process, tmp_path, str(connection.settings_dict["NAME"]), how)
        return await asyncio.wait_for(layer.receive(channel), 10)

    try:
        message = asyncio.run(scenario())
    finally:
        layer.close_inbox()
    assert message == {"type": "session.delta", "payload": {"text": "hel"}}


@pytest.mark.django_db
def test_a_process_on_another_database_hears_nothing_and_a_dead_socket_is_removed(tmp_path: Path) -> None:
    layer = LocalFanoutChannelLayer(directory=str(tmp_path))

    async def scenario() -> bool:
        channel = await layer.new_channel()
        await layer.group_add("session.7", channel)
        stale = layer.directory / "999999-deadbeef.sock"
        stale.touch()  # a socket file whose process is gone
        await asyncio.get_running_loop().run_in_executor(None, _send_from_another_process, tmp_path, "other.sqlite3")
        local = LocalFanoutChannelLayer(directory=str(tmp_path))
        await local.group_send("session.7", {"type": "session.wake", "last_seq": 3})
        got = await asyncio.wait_for(layer.receive(channel), 10)
        return got == {"type": "session.wake", "last_seq": 3} and not stale.exists()

    try:
        assert asyncio.run(scenario())
    finally:
        layer.close_inbox()


@pytest.mark.django_db
def test_a_process_with_consumers_of_its_own_is_refused_the_loop_free_send(tmp_path: Path) -> None:
    layer = LocalFanoutChannelLayer(directory=str(tmp_path))

    async def scenario() -> None:
        await layer.group_add("session.7", await layer.new_channel())

    try:
        asyncio.run(scenario())
        assert not layer.group_send_now("session.7", {"type": "session.wake", "last_seq": 1})
    finally:
        layer.close_inbox()
