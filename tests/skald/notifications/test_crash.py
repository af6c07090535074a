"""A worker killed for real (SIGKILL at a failpoint) between the outbox commit and the send, or
after claiming the row: the restarted worker's sweep delivers the message, once, with its id."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from skald.core.child_env import hermetic_env
from tests.e2e.stack import migrated_sqlite
from tests.notify_receiver import webhook_receiver

BASE_DIR = Path(__file__).resolve().parents[3]
CHILD = [sys.executable, "-m", "tests.skald.notifications.crash_child"]

pytestmark = pytest.mark.slow  # two Python processes of its own


@pytest.mark.parametrize("point", ["notify.before_send", "notify.after_claim"])
def test_a_worker_killed_before_the_send_loses_nothing(tmp_path, point):
    shutil.copy(migrated_sqlite(), tmp_path / "skald.sqlite3")
    env = hermetic_env(SKALD_VAR_DIR=str(tmp_path), SKALD_SYNC_TASKS="1", SKALD_NOTIFY_ALLOW_CIDRS="127.0.0.0/8",
                       SKALD_LOG_LEVEL="WARNING")
    with webhook_receiver() as receiver:
        died = subprocess.run([*CHILD, "record", receiver.url], cwd=BASE_DIR, capture_output=True, text=True,
                              env={**env, "SKALD_FAILPOINTS": point}, timeout=120, check=False)
        assert died.returncode == -signal.SIGKILL, died.stdout + died.stderr
        receiver.secret = json.loads(died.stdout.splitlines()[0])["secret"]
        assert receiver.received == []  # committed, never sent

        restarted = subprocess.run([*CHILD, "recover", receiver.url], cwd=BASE_DIR, capture_output=True,
                                   text=True, env=env, timeout=120, check=False)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    with sqlite3.connect(tmp_path / "skald.sqlite3") as db:
        (row,) = db.execute("SELECT webhook_id, status, attempts FROM skald_delivery").fetchall()
    (got,) = receiver.accepted()  # exactly one, and its signature verified
    assert receiver.refused == []
    assert got.webhook_id == row[0] and row[1] == "sent"
    assert row[2] == (2 if point == "notify.after_claim" else 1)  # the killed claim counted as an attempt
