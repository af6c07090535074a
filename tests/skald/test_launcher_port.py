"""`make run` on a busy port (issue 35): it says so and how to choose another, starts nothing and
never prints that Skald is running."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.e2e.stack import BASE_DIR, hermetic_env


def test_a_busy_port_is_named_with_the_way_out_and_nothing_starts(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "skald.launcher"], cwd=BASE_DIR, capture_output=True,
                              text=True, timeout=60,
                              env=hermetic_env(HOST="127.0.0.1", PORT=str(port), SKALD_VAR_DIR=str(tmp_path)))
    assert done.returncode == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "make run PORT=" in done.stderr
    assert "Skald is running" not in done.stdout + done.stderr
    assert not (tmp_path / "skald.sqlite3").exists()  # nothing was prepared


def test_a_port_that_is_not_a_number_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "skald.launcher"], cwd=BASE_DIR, capture_output=True, text=True,
                          timeout=60, env=hermetic_env(HOST="127.0.0.1", PORT="80a", SKALD_VAR_DIR=str(tmp_path)))
    assert done.returncode == 2
    assert "PORT='80a' is not a port number" in done.stderr
