"""The one projection (SPEC L6): pure, closed vocabulary, loud refusals."""

from __future__ import annotations

import pytest

from loop.projection import (
    CompactionBoundary,
    EventRow,
    ProjectionError,
    arrange_window,
    call_key,
    project,
    window_start,
)
from loop.providers.base import AssistantMessage, SummaryMessage, ToolCallRequest, ToolResultMessage, UserMessage


def user(seq: int, text: str = "hi") -> EventRow:
    return EventRow(seq, "user", {"content": text})


def assistant(seq: int, *calls: tuple[str, str], text: str = "", turn: int = 1) -> EventRow:
    return EventRow(seq, "assistant", {"content": text, "turn": turn, "tool_calls": [
        {"key": key, "id": f"provider-{key}", "name": name, "arguments": "{}"} for key, name in calls]})


def result(seq: int, key: str, name: str, content: str = "ok") -> EventRow:
    return EventRow(seq, "tool_result", {"key": key, "name": name, "content": content})


def journal(seq: int, kind: str = "control:tool_intent") -> EventRow:
    return EventRow(seq, kind, {"key": "x"})


def test_it_projects_the_closed_vocabulary_with_re_keyed_calls():
    key = call_key(3, 2, 0)
    rows = [user(1, "why?"), assistant(2, (key, "echo")), journal(3), result(4, key, "echo", "pong"),
            journal(5, "control:tool_done"), assistant(6, text="because"), journal(7, "canceled"),
            EventRow(8, "subagent_result", {"key": key, "agent": "a", "content": "child says", "outcome": "completed"})]
    # A subagent_result is the durable record of a child's result; the model reads that text through
    # the tool result of its call, so the record adds no message of its own.
    assert project(rows) == (
        UserMessage("why?"),
        AssistantMessage("", (ToolCallRequest(id="e3:t2:c0", name="echo", arguments="{}"),)),
        ToolResultMessage(call_id="e3:t2:c0", name="echo", content="pong"),
        AssistantMessage("because"),
    )


def test_it_masks_every_text_that_reaches_the_model():
    rows = [user(1, "mail bob@example.org"), assistant(2, ("e1:t1:c0", "echo")), result(3, "e1:t1:c0", "echo", "x")]
    masked = project(rows, mask=lambda text: text.replace("bob@example.org", "[email]"))
    assert masked[0] == UserMessage("mail [email]")


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ([user(1), assistant(2, ("e1:t1:c0", "echo"))], "partial tool group"),
        ([user(1), assistant(2, ("e1:t1:c0", "echo")), user(3)], "partial tool group"),
        ([user(1), result(2, "e1:t1:c0", "echo")], "orphan"),
        ([user(1), assistant(2, ("e1:t1:c0", "echo")), result(3, "e1:t1:c0", "other")], "call was"),
        ([user(1), assistant(2, ("e1:t1:c0", "echo")), result(3, "e1:t1:c0", "echo"),
          result(4, "e1:t1:c0", "echo")], "duplicate result"),
        ([user(1), assistant(2, ("e1:t1:c0", "echo"), ("e1:t1:c0", "echo"))], "duplicate call key"),
        ([user(1), EventRow(2, "gossip", {})], "vocabulary"),
        ([user(1), EventRow(2, "subagent_result", {"key": "e1:t1:c0", "agent": "a", "content": "c",
                                                   "outcome": "completed"})], "without its tool result"),
        ([EventRow(1, "user", {"text": "wrong field"})], "malformed"),
    ],
)
def test_it_refuses_loudly(rows, reason):
    with pytest.raises(ProjectionError, match=reason):
        project(rows)


def test_a_compaction_row_inside_the_window_refuses_and_starts_a_window_at_its_head():
    compaction = EventRow(3, "compaction", {"summary": "earlier: pool exhausted", "manifest": {"through": 2}})
    rows = [user(1), assistant(2, text="a"), compaction, user(4, "u4")]
    with pytest.raises(CompactionBoundary):
        project(rows)
    assert project(arrange_window(rows)) == (SummaryMessage(kind="compaction", content="earlier: pool exhausted"),
                                             UserMessage(content="u4"))


def test_the_window_is_the_latest_summary_then_the_tail_it_kept_then_newer_rows():
    older = EventRow(3, "compaction", {"summary": "s1", "manifest": {"tail_first_seq": 2}})
    latest = EventRow(7, "compaction", {"summary": "s2", "manifest": {"tail_first_seq": 5}})
    rows = [user(1), user(2), older, user(4), user(5), assistant(6, text="kept"), latest, user(8)]
    window = arrange_window(rows)
    assert [row.seq for row in window] == [7, 5, 6, 8]
    assert project(window)[0] == SummaryMessage(kind="compaction", content="s2")


def test_a_capped_window_starts_at_a_user_row_so_no_group_is_split():
    rows = [result(7, "e1:t1:c0", "echo"), assistant(8, text="done"), user(9), assistant(10, text="ok")]
    assert window_start(rows, capped=True) == 2
    assert window_start(rows, capped=False) == 0
    with pytest.raises(ProjectionError):
        window_start([result(1, "k", "echo")], capped=True)


@pytest.mark.django_db
def test_it_is_deterministic_and_touches_no_database(django_assert_num_queries):
    rows = [user(1), assistant(2, ("e1:t1:c0", "echo")), result(3, "e1:t1:c0", "echo")]
    with django_assert_num_queries(0):
        first = project(rows)
    assert first == project(list(rows))
