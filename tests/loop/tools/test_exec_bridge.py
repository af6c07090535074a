"""The exec bridge (SPEC L11): argv only, fail-closed allowlist, minimal env, killed on cancel."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from loop.cancellation import CancelToken
from loop.errors import HarnessError, ToolError
from loop.tools.exec_bridge import RESTART_HINT, SAFE_PATH, ExecBridge, ExecResult, parse_allowlist
from loop.tools.hints import RestartHint


def run(bridge: ExecBridge, argv: list[str], cwd: Path, *, timeout: float = 5.0) -> ExecResult:
    return bridge.run(argv, cancel=CancelToken(), timeout=timeout, cwd=str(cwd))


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (killed, not yet reaped by init) counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def gone(pid: int, polls: int = 1000) -> bool:
    """Wait for ``pid`` to die (it was killed: init reaps it); a hang guard of ``polls`` x 10 ms,
    never a measure of how fast."""
    for _ in range(polls):
        if not alive(pid):
            return True
        time.sleep(0.01)
    return False


def cancel_once(token: CancelToken, marker: Path) -> None:
    """Cancel from another thread once the child has written ``marker`` (it is under way)."""

    def watch() -> None:
        for _ in range(3000):
            if marker.exists():
                break
            time.sleep(0.01)
        token.cancel()

    threading.Thread(target=watch, daemon=True).start()


# --- the allowlist ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "  ", " , ,"])
def test_an_empty_allowlist_denies_everything(value: str | None, tmp_path: Path) -> None:
    bridge = ExecBridge.from_env(value)

    with pytest.raises(ToolError) as caught:
        run(bridge, ["echo", "hi"], tmp_path)

    assert caught.value.code == "exec_denied"
    assert bridge.allowlist == ()


def test_a_program_off_the_allowlist_is_denied(tmp_path: Path) -> None:
    bridge = ExecBridge(["echo"])

    for argv in (["ls"], ["/bin/echo", "hi"], ["./echo"], ["echo "]):
        with pytest.raises(ToolError) as caught:
            run(bridge, argv, tmp_path)
        assert caught.value.code == "exec_denied"


def test_an_allowlisted_absolute_path_runs_as_given(tmp_path: Path) -> None:
    echo = shutil.which("echo", path=SAFE_PATH)
    assert echo is not None

    result = run(ExecBridge([echo]), [echo, "hi"], tmp_path)

    assert (result.exit_code, result.stdout) == (0, "hi\n")
    with pytest.raises(ToolError):
        run(ExecBridge([echo]), ["echo", "hi"], tmp_path)  # the bare name is not the path


def test_it_parses_the_allowlist_setting() -> None:
    assert parse_allowlist(" echo, /usr/bin/env ,echo,,git ") == ("echo", "/usr/bin/env", "git")
    for bad in ("bin/echo", "ec ho", "./echo"):
        with pytest.raises(HarnessError) as caught:
            parse_allowlist(bad)
        assert caught.value.code == "exec_allowlist_invalid"


def test_it_refuses_what_is_not_an_argv_list(tmp_path: Path) -> None:
    bridge = ExecBridge(["echo"])

    for argv in ("echo hi", b"echo", [], ["echo", 3], ["echo", "a\0b"]):
        with pytest.raises(ToolError) as caught:
            run(bridge, argv, tmp_path)  # type: ignore[arg-type]
        assert caught.value.code == "exec_invalid_argv"


def test_it_declares_that_an_interrupted_exec_is_never_replayed() -> None:
    assert RESTART_HINT is RestartHint.MARK_INTERRUPTED
    assert ExecBridge([]).restart_hint is RestartHint.MARK_INTERRUPTED


# --- running ------------------------------------------------------------------------------------


def test_shell_metacharacters_reach_the_program_verbatim(tmp_path: Path) -> None:
    result = run(ExecBridge(["echo"]), ["echo", "$(id)", "; ls", "`whoami`", "*"], tmp_path)

    assert result.stdout == "$(id) ; ls `whoami` *\n"


def test_the_child_sees_only_the_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKALD_TEST_SECRET", "hunter2")
    bridge = ExecBridge(["env", "printenv"])

    listing = run(bridge, ["env"], tmp_path)
    probe = run(bridge, ["printenv", "SKALD_TEST_SECRET"], tmp_path)

    assert sorted(listing.stdout.splitlines()) == sorted(
        [f"PATH={SAFE_PATH}", "LANG=C.UTF-8", f"HOME={tmp_path}"]
    )
    assert "hunter2" not in listing.stdout
    assert (probe.exit_code, probe.stdout) == (1, "")


def test_extra_variables_are_explicit_and_cannot_move_path_or_home(tmp_path: Path) -> None:
    result = run(ExecBridge(["printenv"], env={"TZ": "UTC"}), ["printenv", "TZ"], tmp_path)

    assert result.stdout == "UTC\n"
    with pytest.raises(ValueError, match="PATH"):
        ExecBridge(["env"], env={"PATH": "/tmp"})


def test_it_reports_the_exit_code(tmp_path: Path) -> None:
    result = run(ExecBridge(["sh"]), ["sh", "-c", "echo out; echo err >&2; exit 3"], tmp_path)

    assert result == ExecResult(exit_code=3, stdout="out\n", stderr="err\n")


def test_output_is_capped_per_stream_while_the_child_runs_to_the_end(tmp_path: Path) -> None:
    bridge = ExecBridge(["python3"], max_output=1000)
    chatty = "import sys; sys.stdout.write('y' * 1_000_000); sys.stderr.write('e' * 1_000_000); sys.exit(4)"

    result = run(bridge, ["python3", "-c", chatty], tmp_path)

    assert result.truncated
    assert (result.stdout, result.stderr) == ("y" * 1000, "e" * 1000)
    assert result.exit_code == 4


def test_undecodable_output_is_replaced_not_fatal(tmp_path: Path) -> None:
    script = "import sys; sys.stdout.buffer.write(b'ok \\xff')"

    result = run(ExecBridge(["python3"]), ["python3", "-c", script], tmp_path)

    assert result.stdout == "ok \ufffd"


def test_a_timeout_kills_the_child(tmp_path: Path) -> None:
    result = run(ExecBridge(["sleep"]), ["sleep", "30"], tmp_path, timeout=0.5)

    # Killed at its deadline: a sleep that ran its 30 s would have exited 0, not timed out.
    assert result.timed_out and result.exit_code is None and not result.cancelled


def test_cancel_from_another_thread_kills_the_whole_group(tmp_path: Path) -> None:
    token = CancelToken()
    cancel_once(token, tmp_path / "started")
    bridge = ExecBridge(["sh"])

    result = bridge.run(["sh", "-c", "sleep 30 & echo $!; touch started; wait"], cancel=token, timeout=20,
                        cwd=str(tmp_path))

    # The cancel, not the 20 s timeout and not the sleep's end, finished the call.
    assert result.cancelled and result.exit_code is None and not result.timed_out
    grandchild = int(result.stdout.strip())
    assert gone(grandchild)


def test_cancel_kills_a_plain_sleep_within_a_second(tmp_path: Path) -> None:
    token = CancelToken()
    threading.Timer(0.2, token.cancel).start()  # a trigger only: sleep leaves no marker

    result = ExecBridge(["sleep"]).run(["sleep", "30"], cancel=token, timeout=20, cwd=str(tmp_path))

    # The cancel ended it: not the 20 s timeout, not the 30 s sleep's own end.
    assert result.cancelled and not result.timed_out and result.exit_code is None


def test_an_already_cancelled_token_starts_nothing(tmp_path: Path) -> None:
    token = CancelToken()
    token.cancel()

    result = ExecBridge(["sh"]).run(["sh", "-c", f"touch {tmp_path}/ran"], cancel=token, timeout=5, cwd=str(tmp_path))

    assert result == ExecResult(exit_code=None, stdout="", stderr="", cancelled=True)
    assert not (tmp_path / "ran").exists()


def test_background_children_do_not_outlive_the_call(tmp_path: Path) -> None:
    result = run(ExecBridge(["sh"]), ["sh", "-c", "sleep 30 & echo $!"], tmp_path)

    # The call returned when sh exited, not when its 5 s timeout killed the group (not timed out).
    assert result.exit_code == 0 and not result.timed_out
    assert gone(int(result.stdout.strip()))


def test_a_missing_working_directory_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as caught:
        run(ExecBridge(["echo"]), ["echo"], tmp_path / "missing")

    assert caught.value.code == "exec_failed"
    assert not os.path.exists(tmp_path / "missing")
