"""The inspector (O2) is env-blind: it shows names and scalars, never a URL, path, model or secret."""

from __future__ import annotations

import json

import pytest

from loop.bounds import Bounds
from loop.tools.registry import ToolRegistry
from skald.agents.seed import seed_agents
from skald.inspector import inspect


class Secretive:
    name = "openai_compat"
    base_url = "https://models.internal.example/v1"
    model = "gpt-secret"
    secret = "sk-live-should-never-show"


def test_it_renders_names_and_scalars_only():
    rendering = inspect({"llm": Secretive(), "tools": ToolRegistry(), "gate": object(), "hooks": None},
                        profile="production", config={**Bounds().as_dict(), "nested": {"url": "x"}})
    text = json.dumps(rendering)
    assert rendering["provider"] == "openai_compat" and rendering["profile"] == "production"
    assert rendering["mounted"] == ["gate", "llm", "tools"]
    assert rendering["sandbox"] == "unavailable"
    assert "nested" not in rendering["config"] and rendering["config"]["max_turns"] == 8
    for leaked in ("models.internal.example", "gpt-secret", "sk-live"):
        assert leaked not in text


@pytest.mark.django_db
def test_operators_and_auditors_read_it_over_the_api(alice, dave, charlie, api):
    seed_agents()
    body = api(alice).get("/api/inspect?agent=troubleshooter").json()
    assert body["provider"] == "playbook" and body["profile"] == "embedded"
    assert "write_file" in body["tools"] and body["config"]["agent"] == "troubleshooter"
    assert "compaction" in body["mounted"] and body["config"]["compaction.threshold_tokens"] == 16_000
    assert body["config"]["compaction.max_per_episode"] == 16
    assert api(dave).get("/api/inspect").status_code == 200
    assert api(charlie).get("/api/inspect").status_code == 403
    assert api(alice).get("/api/inspect?agent=nobody").json()["code"] == "agent_unknown"
