"""Failpoints kill the process for real, and only at a listed name."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from loop.failpoints import ENV, FAILPOINTS


def run_with(listed: str, name: str) -> subprocess.CompletedProcess[str]:
    script = ("import atexit\nfrom loop.failpoints import failpoint\n"
              "atexit.register(lambda: print('atexit ran'))\n"
              f"try:\n    failpoint({name!r})\n    print('passed')\nfinally:\n    print('finally ran')\n")
    return subprocess.run([sys.executable, "-c", script], env={ENV: listed, "PATH": ""}, capture_output=True,
                          text=True, check=False, cwd=".")


@pytest.mark.parametrize("name", FAILPOINTS)
def test_it_dies_by_sigkill_at_a_listed_point_without_running_cleanup(name: str) -> None:
    done = run_with(f"some.other,{name}", name)
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == ""  # no finally block, no atexit handler


def test_it_passes_an_unlisted_point() -> None:
    done = run_with("loop.after_claim", "loop.after_settle")
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["passed", "finally ran", "atexit ran"]


def test_the_names_are_unique_and_dotted() -> None:
    assert len(set(FAILPOINTS)) == len(FAILPOINTS)
    assert all("." in name and name == name.strip() for name in FAILPOINTS)


def test_with_a_once_directory_only_the_first_process_dies(tmp_path) -> None:
    script = "from loop.failpoints import failpoint\nfailpoint('loop.after_claim')\nprint('passed')\n"
    env = {ENV: "loop.after_claim", "SKALD_FAILPOINTS_ONCE": str(tmp_path), "PATH": ""}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert first.returncode == -signal.SIGKILL
    assert (second.returncode, second.stdout) == (0, "passed\n")
