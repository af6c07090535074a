"""A scripted model for compaction tests: each exchange asks ``echo`` for a fact-laden result, then
answers; a summary request gets whatever ``summarize`` writes (the extractive summary by default)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loop.compaction.extractive import extractive_summary
from loop.compaction.policy import CompactionPolicy
from loop.compaction.prompt import is_summary_request
from loop.providers.base import Delta, ProviderRequest
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn

# Small numbers so a test crosses the threshold in a few exchanges (an echo result is ~110 tokens).
SMALL = CompactionPolicy(threshold_tokens=600, keep_tokens=400, keep_rows=100, row_trigger=400,
                         clear_tool_results_over=400, summary_max_tokens=300)


def fact(n: int) -> str:
    return (f"host web-{n} answered ERR_{n}07 from /srv/app/module_{n}.py during build 4.{n}.1; "
            f"request req_{n}a9f3 waited {n}500 ms on pool_{n}. ") * 3


def scripted_model(summarize: Callable[[str], str] = extractive_summary, *, rounds: int = 1) -> LoopbackProvider:
    """``rounds`` echo calls per exchange, then the answer."""

    def respond(request: ProviderRequest) -> list[Delta]:
        if is_summary_request(request):
            return text_turn(summarize(request.messages[0].content), usage=(50, 20))
        # The exchange's own user row may be summarised away in a long exchange: count from metadata.
        done = int(request.metadata["turn"]) - 1
        if done >= rounds:
            return text_turn(f"done after {done} rounds")
        return tool_turn(("echo", {"text": fact(int(request.metadata["exchange"]) * 100 + done)}))

    return LoopbackProvider([respond], repeat_last=True)


@pytest.fixture
def small_policy() -> CompactionPolicy:
    return SMALL
