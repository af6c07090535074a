"""``execute_cmd`` through the product (issue 28 §3): a session's command cannot read another
session's materialised files, var/ or the database; without a sandbox the inspector, the approval
card and production's refusal say so."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from loop.cancellation import CancelToken
from loop.errors import ToolError
from loop.ports import ToolContext, TurnScope
from skald.agents.seed import seed_agents
from skald.checks import check_exec_sandbox, check_exec_sandbox_mode
from skald.inspector import inspect_agent
from skald.loop_adapters.catalog import AgentRowCatalog
from skald.loop_adapters.preview import preview_for
from skald.loop_adapters.sandbox import exec_sandbox
from skald.loop_adapters.store import kernel_store
from skald.tools.catalog import BUILTIN_TOOLS

pytestmark = [pytest.mark.django_db(transaction=True)]


def require_bubblewrap() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("bubblewrap is not installed, and CI must run the confinement tests (.ci/run installs it)")
        pytest.skip("bubblewrap (bwrap) is not installed here: apt-get install bubblewrap to run the confinement tests")


def context(user_id: int, session_id: int, root: Path) -> ToolContext:
    scope = TurnScope(session_id=session_id, exchange_id=1, principal=f"user:{user_id}", user_id=user_id,
                      agent="troubleshooter", workspace=root / f"session-{session_id}")
    return ToolContext(scope=scope, call_key="e1:t1:c0", cancel=CancelToken(), timeout=20)


def run(name: str, args: dict, ctx: ToolContext) -> str:
    tool = BUILTIN_TOOLS.get(name)
    assert tool is not None
    return tool.run(args, ctx)


def new_session(user) -> int:
    return kernel_store().create_session(owner_id=user.pk, agent="troubleshooter", source="web", title="t",
                                         principal=f"user:{user.pk}").pk


def test_a_command_cannot_read_its_neighbours_var_or_the_database(alice, charlie, settings):
    require_bubblewrap()
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "cat,sh"
    root = Path(settings.SKALD_WORKSPACE_ROOT)
    alices, charlies = new_session(alice), new_session(charlie)
    mine, theirs = context(alice.pk, alices, root), context(charlie.pk, charlies, root)
    run("write_file", {"path": "secret-plan.txt", "content": "charlie's plan\n"}, theirs)
    assert "charlie's plan" in run("execute_cmd", {"argv": ["cat", "secret-plan.txt"]}, theirs)  # on disk now
    database = str(django_settings.DATABASES["default"]["NAME"])
    key = (Path(settings.VAR_DIR) / "secret_key").read_text()
    attempts = [
        ["cat", f"../session-{charlies}/secret-plan.txt"],
        ["cat", str(root / f"session-{charlies}" / "secret-plan.txt")],
        ["cat", str(Path(settings.VAR_DIR) / "secret_key")],
        ["sh", "-c", f"cat {database} | head -c 16; ls {settings.VAR_DIR}"],
    ]
    for argv in attempts:
        output = run("execute_cmd", {"argv": argv}, mine)
        stdout = output.split("stdout:\n", 1)[1].split("\nstderr:\n", 1)[0]
        assert "charlie's plan" not in output and key not in output and "SQLite format" not in output
        assert "secret_key" not in stdout  # var/ cannot even be listed
        assert "exit code: 0" not in output or argv[0] == "sh"


def test_the_inspector_and_the_approval_card_name_the_sandbox(alice, settings):
    require_bubblewrap()
    seed_agents()
    agent = AgentRowCatalog().get("troubleshooter")
    scope = context(alice.pk, 1, Path(settings.SKALD_WORKSPACE_ROOT)).scope

    assert inspect_agent(agent)["sandbox"] == "bubblewrap"
    card = preview_for("execute_cmd", {"argv": ["ls"]}, scope)
    assert card.startswith("Sandbox: bubblewrap") and "network none" in card and "64 processes" in card

    settings.SKALD_EXEC_SANDBOX = "off"
    assert inspect_agent(agent)["sandbox"] == "unavailable"
    assert preview_for("execute_cmd", {"argv": ["ls"]}, scope).startswith("Sandbox: none")


def test_without_a_sandbox_production_refuses_commands_unless_told_otherwise(settings):
    settings.SKALD_EXEC_SANDBOX = "off"
    settings.DEBUG = False
    settings.SKALD_EXEC_UNCONFINED_OK = False

    with pytest.raises(ToolError) as caught:
        exec_sandbox()
    assert caught.value.code == "exec_unconfined_refused"
    assert [problem.id for problem in check_exec_sandbox()] == ["skald.E011"]

    settings.SKALD_EXEC_UNCONFINED_OK = True
    assert exec_sandbox().name == "none" and check_exec_sandbox() == []


def test_the_sandbox_mode_is_checked(settings):
    settings.SKALD_EXEC_SANDBOX = "bwrap-please"
    assert [problem.id for problem in check_exec_sandbox_mode()] == ["skald.E012"]
