"""Confinement (issue 28 §3): a command sees its own workspace and nothing of the server.

Every attempt here is made for real, under bubblewrap, from a workspace laid out as a worker lays
it out (``var/workspaces/session-<id>`` beside ``var/secret_key`` and the SQLite file), and each
escape is checked against an unconfined control run so a passing test cannot be a broken probe.
The suite skips only where bubblewrap is not installed and CI is unset; in CI it must run.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loop.cancellation import CancelToken
from loop.tools.exec_bridge import ExecBridge, ExecResult
from loop.tools.sandbox import SANDBOX_HOME, Bubblewrap, Limits, Unconfined
from tests.netprobe import anyone_connected, loopback_listener

PROGRAMS = ["cat", "ls", "sh", "bash", "head", "python3", "sleep"]
MIB = 1024 * 1024
LIMITS = Limits(cpu_seconds=1, memory_bytes=256 * MIB, file_bytes=1 * MIB, open_files=64, processes=24)
REPO_VAR = Path(__file__).resolve().parents[3] / "var"
CANARY = "skald-canary-7f3a"


def _bubblewrap(**options: object) -> Bubblewrap:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("bubblewrap is not installed, and CI must run the confinement suite (.ci/run installs it)")
        pytest.skip("bubblewrap (bwrap) is not installed here: apt-get install bubblewrap to run the confinement suite")
    sandbox = Bubblewrap.find(limits=LIMITS, **options)  # type: ignore[arg-type]
    if sandbox is None:
        pytest.fail("bwrap is installed but a trial run failed (namespaces forbidden?)")
    return sandbox


@pytest.fixture(scope="module")
def confined() -> ExecBridge:
    return ExecBridge(PROGRAMS, sandbox=_bubblewrap())


@pytest.fixture
def server(tmp_path: Path) -> Path:
    """A worker's var/: its key, its database, and two sessions' materialised workspaces."""
    var = tmp_path / "var"
    (var / "workspaces" / "session-1").mkdir(parents=True)
    (var / "workspaces" / "session-2").mkdir(parents=True)
    (var / "secret_key").write_text(CANARY + "-key")
    (var / "skald.sqlite3").write_text(CANARY + "-database")
    (var / "workspaces" / "session-1" / "secret-plan.txt").write_text(CANARY + "-plan")
    (var / "workspaces" / "session-2" / "notes.txt").write_text("mine\n")
    return var


@pytest.fixture
def workspace(server: Path) -> Path:
    return server / "workspaces" / "session-2"


def run(bridge: ExecBridge, argv: list[str], cwd: Path, *, timeout: float = 20.0) -> ExecResult:
    return bridge.run(argv, cancel=CancelToken(), timeout=timeout, cwd=str(cwd))


# --- what it sees ---------------------------------------------------------------------------------


def test_it_reads_and_writes_its_own_workspace(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["sh", "-c", "cat notes.txt; echo made > out.txt; pwd; echo $HOME"], workspace)

    assert (result.exit_code, result.stdout) == (0, f"mine\n{SANDBOX_HOME}\n{SANDBOX_HOME}\n")
    assert (workspace / "out.txt").read_text() == "made\n"


def test_its_root_holds_the_workspace_and_read_only_system_files_only(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["ls", "-A", "/"], workspace)

    assert set(result.stdout.split()) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin",
                                          "tmp", "usr", "workspace"}
    denied = run(confined, ["sh", "-c", "echo x > /usr/escape; echo x > /etc/escape"], workspace)
    assert denied.exit_code != 0 and not Path("/usr/escape").exists()


@pytest.mark.parametrize("target", [
    "../session-1/secret-plan.txt",      # a neighbour, relatively
    "{var}/workspaces/session-1/secret-plan.txt",  # a neighbour, absolutely
    "{var}/secret_key",
    "{var}/skald.sqlite3",
    "../../secret_key",
    str(REPO_VAR / "secret_key"),        # this checkout's own key
    str(REPO_VAR / "audit_key"),
])
def test_it_cannot_read_other_sessions_var_the_database_or_the_keys(confined: ExecBridge, server: Path,
                                                                      workspace: Path, target: str) -> None:
    path = target.format(var=server)
    control = run(ExecBridge(PROGRAMS), ["cat", path], workspace)
    assert control.exit_code == 0 or not (workspace / path).exists()  # the probe reads it unconfined

    result = run(confined, ["cat", path], workspace)

    assert result.exit_code != 0 and CANARY not in result.stdout and result.stdout == ""


def test_a_shell_cannot_find_the_server_anywhere(confined: ExecBridge, server: Path, workspace: Path) -> None:
    result = run(confined, ["sh", "-c", f"ls -A ..; ls {server}; ls {REPO_VAR}; cat /proc/1/root/{server}/secret_key"],
                 workspace)

    assert not {"var", "work", "home", "root", "session-1", "secret_key"} & set(result.stdout.split())
    assert CANARY not in result.stdout + result.stderr


def test_it_cannot_read_the_servers_environment(confined: ExecBridge, workspace: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKALD_CANARY", CANARY)
    command = f"cat /proc/1/environ /proc/{os.getpid()}/environ /proc/{os.getppid()}/environ; env"

    result = run(confined, ["sh", "-c", command], workspace)

    assert CANARY not in result.stdout
    assert "SKALD_CANARY" not in result.stdout


# --- the network ----------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with loopback_listener() as server:
        yield server


def connect_argv(listener: socket.socket) -> list[str]:
    return ["bash", "-c", f"echo hello > /dev/tcp/127.0.0.1/{listener.getsockname()[1]}"]


def test_it_has_no_network(confined: ExecBridge, workspace: Path, listener: socket.socket) -> None:
    result = run(confined, connect_argv(listener), workspace)

    assert result.exit_code != 0 and not anyone_connected(listener)
    assert run(ExecBridge(PROGRAMS), connect_argv(listener), workspace).exit_code == 0  # the control
    assert anyone_connected(listener)


def test_the_deployment_may_allow_the_network(workspace: Path, listener: socket.socket) -> None:
    networked = ExecBridge(PROGRAMS, sandbox=_bubblewrap(network=True))

    result = run(networked, connect_argv(listener), workspace)

    assert result.exit_code == 0 and anyone_connected(listener)


# --- the limits -----------------------------------------------------------------------------------


def test_a_fork_bomb_hits_the_process_limit(confined: ExecBridge, workspace: Path) -> None:
    bomb = "n=0; while [ $n -lt 500 ]; do sleep 60 & n=$((n+1)); done; echo started $n"

    result = run(confined, ["sh", "-c", bomb], workspace)

    assert "Cannot fork" in result.stderr and "started 500" not in result.stdout


def test_a_fork_bomb_does_not_starve_its_neighbours(confined: ExecBridge, workspace: Path, server: Path) -> None:
    """The process count is per sandbox, not per uid: a bomb holding every slot it may have leaves
    another session's command free to fork."""
    cancel = CancelToken()
    bomb = "for i in $(seq 200); do sleep 6017 & done 2>/dev/null; sleep 6017"
    bomber = threading.Thread(target=lambda: confined.run(["bash", "-c", bomb], cancel=cancel, timeout=60,
                                                          cwd=str(workspace)))
    bomber.start()
    try:
        deadline = time.monotonic() + 30
        while len(sleepers("6017")) < LIMITS.processes - 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sleepers("6017")) >= LIMITS.processes - 4

        neighbour = run(confined, ["sh", "-c", "sleep 0 & sleep 0 & wait; echo forked"], server / "workspaces" /
                        "session-1")

        assert neighbour.stdout == "forked\n"
    finally:
        cancel.cancel("done")
        bomber.join(30)


def test_a_huge_file_stops_at_the_file_size_limit(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["sh", "-c", "head -c 50000000 /dev/zero > big"], workspace)

    assert result.exit_code != 0
    assert (workspace / "big").stat().st_size <= LIMITS.file_bytes


def test_a_huge_file_in_tmp_stops_too(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["sh", "-c", "head -c 50000000 /dev/zero > /tmp/big; wc -c < /tmp/big"], workspace)

    assert "File size limit exceeded" in result.stderr and int(result.stdout) <= LIMITS.file_bytes


def test_too_much_memory_fails(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["python3", "-c", "bytearray(512 * 1024 * 1024); print('allocated')"], workspace)

    assert result.exit_code != 0 and "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_a_busy_loop_hits_the_cpu_limit_before_the_timeout(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["sh", "-c", "while :; do :; done"], workspace, timeout=120)

    assert not result.timed_out and result.exit_code not in (0, None)


def test_it_runs_as_an_unprivileged_user(confined: ExecBridge, workspace: Path) -> None:
    result = run(confined, ["sh", "-c", "id -u; grep CapEff /proc/self/status"], workspace)

    uid, caps = result.stdout.split("\n", 1)
    assert uid != "0" and caps.split()[1] == "0000000000000000"


# --- cancel ---------------------------------------------------------------------------------------


def sleepers(marker: str) -> list[int]:
    """Live host pids of ``sleep <n>`` with ``n`` starting with ``marker`` (zombies are already killed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if argv[0].endswith("sleep") and argv[1:2] and argv[1].startswith(marker) and state not in {"Z", "X"}:
            found.append(int(entry.name))
    return found


def test_cancel_kills_everything_in_the_sandbox(confined: ExecBridge, workspace: Path) -> None:
    cancel = CancelToken()
    results: list[ExecResult] = []
    runner = threading.Thread(target=lambda: results.append(confined.run(
        ["sh", "-c", "sleep 3217 & sleep 3218"], cancel=cancel, timeout=60, cwd=str(workspace))))
    runner.start()
    deadline = time.monotonic() + 20
    while len(sleepers("321")) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(sleepers("321")) == 2

    cancel.cancel("stop")
    runner.join(20)

    assert results and results[0].cancelled
    deadline = time.monotonic() + 10  # the pid namespace's teardown is asynchronous
    while sleepers("321") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sleepers("321") == []


def test_a_timeout_and_the_output_cap_still_hold(workspace: Path) -> None:
    bridge = ExecBridge(PROGRAMS, sandbox=_bubblewrap(), max_output=1000)

    slow = run(bridge, ["sh", "-c", "sleep 3219"], workspace, timeout=0.5)
    chatty = run(bridge, ["head", "-c", "100000", "/dev/zero"], workspace)

    assert slow.timed_out and slow.exit_code is None
    assert chatty.truncated and len(chatty.stdout) == 1000 and chatty.exit_code == 0
    deadline = time.monotonic() + 10
    while sleepers("3219") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sleepers("3219") == []


def test_unconfined_keeps_the_limits_it_can(workspace: Path) -> None:
    bridge = ExecBridge(PROGRAMS, sandbox=Unconfined(limits=LIMITS))

    result = run(bridge, ["sh", "-c", "head -c 50000000 /dev/zero > big"], workspace)

    assert result.exit_code != 0 and (workspace / "big").stat().st_size <= LIMITS.file_bytes
