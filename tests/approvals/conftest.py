"""Fixtures for the durable approval flow: a troubleshooter session, scripted providers, inline tasks."""

from __future__ import annotations

import pytest

from skald.agents.seed import seed_agents
from skald.loop_adapters.discovery import forget_seen
from skald.sessions.services import session_create


@pytest.fixture
def inline_tasks(settings) -> None:
    settings.SKALD_SYNC_TASKS = True


@pytest.fixture
def workspace_root(settings, tmp_path):
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    return settings.SKALD_WORKSPACE_ROOT


@pytest.fixture
def troubleshooting(alice, inline_tasks, workspace_root):
    """alice's session with the seeded troubleshooter and the default approval rules."""
    from approvals.rules.seed import default_rules_ensure

    seed_agents()
    default_rules_ensure()
    forget_seen()
    return session_create(user=alice, agent="troubleshooter", title="flow")
