"""The loop's bounds (SPEC L2): the seed's defaults, overrides, and nothing exceeded silently."""

from __future__ import annotations

import pytest

from loop.bounds import Bounds, truncate_output
from loop.errors import HarnessError


def test_the_defaults_are_the_seeds():
    bounds = Bounds()
    assert (bounds.max_turns, bounds.tool_output_cap, bounds.tool_timeout) == (8, 16 * 1024, 30.0)
    assert (bounds.request_cap, bounds.replay_cap, bounds.payload_cap) == (1024 * 1024, 500, 64 * 1024)


def test_overrides_apply_per_deployment_then_per_agent():
    deployment = Bounds().override({"max_turns": 12})
    agent = deployment.override({"tool_timeout": 5, "budget_tokens": 1000})
    assert (agent.max_turns, agent.tool_timeout, agent.budget_tokens) == (12, 5.0, 1000)


@pytest.mark.parametrize("values", [{"max_turn": 3}, {"max_turns": 0}, {"max_turns": -1}, {"tool_timeout": "5"},
                                    {"max_turns": True}])
def test_a_bad_override_refuses_loudly(values):
    with pytest.raises(HarnessError) as refused:
        Bounds().override(values)
    assert refused.value.code == "bounds_invalid"


def test_truncation_keeps_a_visible_marker_within_the_cap():
    text, cut = truncate_output("é" * 20_000, 16 * 1024)
    assert cut and len(text.encode()) <= 16 * 1024 and "output truncated" in text
    assert truncate_output("short", 16 * 1024) == ("short", False)


def test_the_request_cap_refuses_before_sending():
    from loop.budgets import DispatchAuthority
    from loop.cancellation import CancelToken
    from loop.dispatch import dispatch
    from loop.providers.base import ProviderRequest, UserMessage
    from loop.providers.loopback import LoopbackProvider, text_turn

    provider = LoopbackProvider([text_turn("never")])
    request = ProviderRequest(system="s", messages=(UserMessage("x" * 2000),))
    with pytest.raises(HarnessError) as refused:
        dispatch(provider, request, authority=DispatchAuthority(), cancel=CancelToken(), request_cap=1000)
    assert refused.value.code == "request_too_large" and provider.calls == []

