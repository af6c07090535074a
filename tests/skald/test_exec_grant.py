"""``execute_cmd`` runs what the frame was granted (issue 27, SPEC S2): the deployment's programs,
narrowed to the frame's process grant; never a program outside the deployment's list."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.cancellation import CancelToken
from loop.errors import ToolError
from loop.ports import ToolContext, TurnScope
from skald.tools.exec import EXECUTE_CMD, frame_allowlist


def context(exec_allowlist: tuple[str, ...] | None) -> ToolContext:
    scope = TurnScope(session_id=1, exchange_id=1, principal="user:1", user_id=1, agent="a", workspace=Path("/tmp"),
                      exec_allowlist=exec_allowlist)
    return ToolContext(scope=scope, call_key="k", cancel=CancelToken(), timeout=5)


def test_a_frame_runs_the_deployments_programs_narrowed_to_its_grant(settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "ls,cat,grep"
    assert frame_allowlist(context(None)) == ("ls", "cat", "grep")
    assert frame_allowlist(context(("cat", "grep"))) == ("cat", "grep")
    assert frame_allowlist(context(("cat", "rm"))) == ("cat",)  # never beyond the deployment's
    assert frame_allowlist(context(())) == ()


def test_a_program_outside_the_frames_grant_is_refused_before_it_runs(settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "ls,cat"
    with pytest.raises(ToolError, match="not on the exec allowlist"):
        EXECUTE_CMD.run({"argv": ["ls"]}, context(("cat",)))
