"""``/metrics`` carries the GenAI client histograms, read from the stored assistant rows of every
process's provider calls (tracing off: they are always on)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loop.driver import run_turns_keyed
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.tools.registry import ToolRegistry
from skald import metrics
from tests.loop.conftest import ECHO

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def samples(name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        if family.name == name:
            for sample in family.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_token_usage_and_operation_duration_are_histograms_per_provider(make_env):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "a"}), usage=(100, 7)), text_turn("b", usage=(300, 2))])
    env = make_env(provider, tools=ToolRegistry([ECHO]))
    run_turns_keyed(env, request_key="m1", content="count me")

    usage = samples("gen_ai_client_token_usage")
    inputs = (("gen_ai_operation_name", "chat"), ("gen_ai_provider_name", "loopback"), ("gen_ai_token_type", "input"))
    assert usage[("gen_ai_client_token_usage_count", inputs)] == 2
    assert usage[("gen_ai_client_token_usage_sum", inputs)] == 400
    assert usage[("gen_ai_client_token_usage_bucket", (*inputs, ("le", "256")))] == 1
    assert usage[("gen_ai_client_token_usage_bucket", (*inputs, ("le", "1024")))] == 2
    outputs = (*inputs[:2], ("gen_ai_token_type", "output"))
    assert usage[("gen_ai_client_token_usage_sum", outputs)] == 9
    duration = samples("gen_ai_client_operation_duration")
    labels = inputs[:2]
    assert duration[("gen_ai_client_operation_duration_count", labels)] == 2
    assert duration[("gen_ai_client_operation_duration_bucket", (*labels, ("le", "+Inf")))] == 2
