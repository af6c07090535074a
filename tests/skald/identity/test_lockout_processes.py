"""The failure counters are shared by every process (issue 17): failures made in another process
count towards the same lockout (the account from one address), with no Redis (the counters are
database rows)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.conftest import PASSWORD, make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BASE = Path(__file__).resolve().parents[3]
OTHER_PROCESS = """
import django, os, sys
django.setup()
from django.test import Client
codes = [Client().post("/admin/login/?next=/console/", {"username": "erin", "password": "guess"},
                       REMOTE_ADDR="10.1.1.1").status_code for _ in range(int(sys.argv[1]))]
print(" ".join(map(str, codes)))
"""


def _env_for_this_database() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "skald.settings"
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        env.pop("DATABASE_URL", None)
        env["SKALD_SQLITE_PATH"] = str(db["NAME"])
    else:
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return env


def test_failures_in_two_processes_add_up_to_one_lockout() -> None:
    make_user("erin", "operator")
    for _ in range(10):
        assert APIClient().post("/api/auth/token/", {"username": "erin", "password": "guess"},
                                format="json", REMOTE_ADDR="10.1.1.1").status_code == 401
    other = subprocess.run([sys.executable, "-c", OTHER_PROCESS, "10"], cwd=BASE, env=_env_for_this_database(),
                           capture_output=True, text=True, timeout=120, check=True)
    assert other.stdout.split()[-10:] == ["200"] * 9 + ["429"], other.stderr[-2000:]
    locked = APIClient().post("/api/auth/token/", {"username": "erin", "password": PASSWORD}, format="json",
                              REMOTE_ADDR="10.1.1.1")
    assert locked.status_code == 429 and locked.json()["code"] == "sign_in_locked"
