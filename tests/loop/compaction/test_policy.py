"""When a compaction is pending and which rows it covers (pure)."""

from __future__ import annotations

import pytest

from loop.compaction.policy import CompactionPolicy, WindowItem, plan_compaction
from loop.errors import HarnessError
from loop.projection import EventRow

POLICY = CompactionPolicy(threshold_tokens=100, keep_tokens=60, keep_rows=50, row_trigger=40)


def item(seq: int, kind: str, tokens: int, **payload: object) -> WindowItem:
    return WindowItem(EventRow(seq, kind, payload), tokens)


def exchange(first_seq: int, tokens: int) -> list[WindowItem]:
    """user → assistant asking a tool → tool result → assistant answer, ``tokens`` each."""
    return [item(first_seq, "user", tokens), item(first_seq + 1, "assistant", tokens),
            item(first_seq + 2, "tool_result", tokens), item(first_seq + 3, "assistant", tokens)]


def test_the_defaults_are_the_seeds_numbers():
    policy = CompactionPolicy()
    assert (policy.threshold_tokens, policy.keep_tokens, policy.max_per_episode, policy.latch_permille) == (
        16_000, 20_000, 16, 500)


def test_nothing_is_pending_below_the_threshold():
    assert plan_compaction(exchange(1, 10) + exchange(5, 10), POLICY) is None


def test_past_the_threshold_the_old_exchanges_are_covered_and_the_newest_stay_verbatim():
    items = exchange(1, 10) + exchange(5, 10) + exchange(9, 10) + exchange(13, 10)
    plan = plan_compaction(items, POLICY)
    assert plan is not None and plan.reason == "tokens"
    assert [i.row.seq for i in plan.tail] == [13, 14, 15, 16]  # 40 tokens fit in 60, two exchanges would not
    assert [i.row.seq for i in plan.covered] == list(range(1, 13)) and plan.covered_tokens == 120


def test_a_long_current_exchange_is_cut_at_an_assistant_row_never_inside_a_tool_group():
    items = exchange(1, 30) + [item(5, "user", 5)] + [
        row for n in range(6, 30, 2) for row in (item(n, "assistant", 10), item(n + 1, "tool_result", 10))]
    plan = plan_compaction(items, POLICY)
    assert plan is not None
    assert plan.tail[0].row.kind == "assistant" and plan.tail_tokens <= 60


def test_rows_alone_make_a_cycle_pending_before_the_replay_cap_would_cut():
    items = [row for n in range(1, 41, 4) for row in exchange(n, 1)]
    plan = plan_compaction(items, POLICY)
    assert plan is not None and plan.reason == "rows"


def test_after_a_compaction_only_the_summary_is_not_enough_to_compact_again():
    summary = item(20, "compaction", 30, manifest={"tail_first_seq": 13})
    items = [summary, *exchange(13, 10), item(21, "user", 10)]
    assert plan_compaction(items, POLICY) is None


def test_the_new_tail_starts_after_the_previous_compaction_row():
    summary = item(20, "compaction", 5, manifest={"tail_first_seq": 13})
    items = [summary, *exchange(13, 20), *exchange(21, 20), *exchange(25, 5)]
    plan = plan_compaction(items, POLICY)
    assert plan is not None and plan.previous_seq == 20
    assert min(i.row.seq for i in plan.tail) > 20
    covered = sorted(i.row.seq for i in plan.covered)
    assert covered == [13, 14, 15, 16, 20, 21, 22, 23, 24]  # old tail, old summary, newer rows: one run


def test_a_disabled_policy_never_compacts():
    items = exchange(1, 100) + exchange(5, 100)
    assert plan_compaction(items, CompactionPolicy(enabled=False, threshold_tokens=1)) is None


def test_overrides_refuse_unknown_keys_and_non_positive_numbers():
    assert CompactionPolicy().override({"keep_tokens": 8_000}).keep_tokens == 8_000
    for bad in ({"keep": 1}, {"threshold_tokens": 0}, {"enabled": "yes"}, {"max_per_episode": True}):
        with pytest.raises(HarnessError):
            CompactionPolicy().override(bad)
