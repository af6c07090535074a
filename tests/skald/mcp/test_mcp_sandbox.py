"""A stdio MCP server in the exec sandbox (bubblewrap): it reads its own workspace, and nothing of the
host outside what it is granted (its interpreter, its virtualenv, its script), neither another
file of the repository nor a file beside the test's. Skipped where bubblewrap cannot run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.actors import Actor
from loop.models import ToolCall
from loop.providers.loopback import text_turn, tool_turn
from skald.mcp.client import pool
from skald.mcp.sandbox import grants, stdio_confinement
from skald.mcp.services import mcp_server_create
from tests.skald.mcp.conftest import SERVER_SCRIPT

pytestmark = [pytest.mark.django_db(transaction=True)]

REPOSITORY_FILE = str(Path(__file__).resolve().parents[3] / "pyproject.toml")


@pytest.fixture
def boxed(mcp_setup: None, settings: Any, alice: Any, tmp_path: Path) -> Path:
    settings.SKALD_MCP_STDIO_SANDBOX = "auto"
    if stdio_confinement([sys.executable, SERVER_SCRIPT]) is None:
        pytest.skip("bubblewrap does not work on this machine")
    state = tmp_path / "state"
    state.write_text("/workspace")  # the server's counters, in its own workspace
    variant = tmp_path / "variant"
    variant.write_text("")
    workspace = settings.SKALD_WORKSPACE_ROOT / "mcp-boxed"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "inside.txt").write_text("hello from the workspace")
    outside = tmp_path / "outside.txt"
    outside.write_text("top secret")
    mcp_server_create(actor=Actor.user(alice), data={
        "name": "boxed", "transport": "stdio", "argv": [sys.executable, SERVER_SCRIPT], "trust": "trusted",
        "agents": ["operator"], "enabled": True,
        "secret_env": {"MCP_TEST_STATE": str(state), "MCP_TEST_VARIANT": str(variant)}})
    return outside


def test_it_grants_the_interpreter_its_virtualenv_and_the_script_only():
    granted = grants([sys.executable, SERVER_SCRIPT])
    assert granted[0] == sys.executable and SERVER_SCRIPT in granted
    assert str(Path(sys.executable).parent.parent) in granted  # the virtualenv
    assert REPOSITORY_FILE not in granted and str(Path(SERVER_SCRIPT).parent) not in granted


def test_a_confined_server_reads_its_workspace_and_nothing_else(boxed, script, ask):
    provider = script(tool_turn(("mcp__boxed__peek", {"path": "/workspace/inside.txt"})),
                      tool_turn(("mcp__boxed__peek", {"path": str(boxed)})),
                      tool_turn(("mcp__boxed__peek", {"path": REPOSITORY_FILE})),
                      tool_turn(("mcp__boxed__peek", {"path": "/etc/shadow"})),
                      text_turn("done"))

    exchange = ask("look around")

    assert exchange.outcome == "completed"
    results = [json.loads(c.result)["result"] for c in ToolCall.objects.filter(exchange=exchange).order_by("pk")]
    assert results[0] == "read: hello from the workspace"
    assert results[1:] == [f"cannot read {boxed}: FileNotFoundError",
                           f"cannot read {REPOSITORY_FILE}: FileNotFoundError",
                           "cannot read /etc/shadow: FileNotFoundError"]
    assert len(provider.calls) == 5
    pid = pool().process_of("boxed")
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")
