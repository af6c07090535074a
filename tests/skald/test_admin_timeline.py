"""The run timeline reads as words: one line per event, journal rows folded, children indented."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from loop.events import EventKind
from loop.models import SessionEvent
from skald.admin.timeline import describe, receipt_rows, timeline_lines

AT = datetime(2026, 12, 1, 9, 30, 5, tzinfo=UTC)


def event(seq: int, kind: str, payload: dict, narrative: str = "") -> SessionEvent:
    return SessionEvent(seq=seq, kind=kind, payload=payload, narrative=narrative, created_at=AT)


def test_it_writes_one_line_per_event_in_words_and_folds_journal_rows() -> None:
    events = [
        event(1, "user", {"content": "Checkout 502s", "author": "user:1"}),
        event(2, "assistant", {"content": "", "turn": 1, "output_tokens": 9, "input_tokens": 50,
                               "tool_calls": [{"key": "k", "id": "c", "name": "read_logs", "arguments": "{}"}]}),
        event(3, "control:tool_intent", {"key": "e1:t1:c0", "name": "read_logs"}),
        event(4, "tool_result", {"key": "e1:t1:c0", "name": "read_logs", "content": "pool exhausted"}),
        event(5, "control:tool_done", {"key": "e1:t1:c0"}),
        event(6, "control:approval_resolved", {"status": "approved", "by": "user:3", "reason": "fine"}),
        event(7, "user", {"content": "Look at the pool.", "author": "agent:troubleshooter"},
              narrative="child:researcher:"),
        event(8, "assistant", {"content": "Done.", "turn": 2}, narrative="child:researcher:"),
    ]
    lines = timeline_lines(events, agent="troubleshooter", user="alice", names={"user:3": "carol"})
    assert [(line.who, line.text) for line in lines] == [
        ("alice", "Checkout 502s"),
        ("troubleshooter", "calls read_logs()"),
        ("tool read_logs", "pool exhausted"),
        ("carol", "answered the parked call — “fine”"),
        ("troubleshooter", "Look at the pool."),  # the delegating agent's task, by its name
        ("researcher", "Done."),
    ]
    assert [sub.seq for sub in lines[1].folded] == [3] and [sub.seq for sub in lines[2].folded] == [5]
    assert lines[2].outcome == "completed" and lines[3].outcome == "approved"
    assert (lines[4].who_css, lines[0].who_css) == ("who-agent", "who-user")
    assert [line.depth for line in lines] == [0, 0, 0, 0, 1, 1]


def test_a_failed_tool_reads_as_an_error_and_the_receipt_is_a_table() -> None:
    [line] = timeline_lines([event(1, "tool_result", {"name": "write_file", "content": "denied", "is_error": True})],
                            agent="a", user="u")
    assert (line.outcome, line.outcome_css) == ("error", "outcome-error")
    assert receipt_rows({"turns": 3, "outcome": "completed", "calls": [1, 2], "first_seq": None,
                         "detail": {"answer": "disk full", "files": [{"path": "/var/log"}]}}) == [
        ("turns", "3"), ("outcome", "completed"), ("calls", "1, 2"), ("first seq", "none"),
        ("detail · answer", "disk full"), ("detail · files", '[{"path": "/var/log"}]')]


def test_a_compaction_its_probe_and_a_quota_stop_are_lines_an_operator_reads() -> None:
    manifest = {"first_seq": 1, "last_seq": 40, "count": 32, "tail_first_seq": 41, "covered_tokens": 16400}
    events = [
        event(42, "compaction", {"summary": "Summary of the earlier conversation", "manifest": manifest}),
        event(43, "control:compaction_probe", {"lost_permille": 600, "result": "degraded", "degraded": True,
                                               "latched": True, "pre_hits": 10, "post_hits": 4, "probes": []}),
        event(90, "control:compaction_quota", {"name": "compaction_quota_exhausted", "compactions": 16,
                                               "max_per_episode": 16}, narrative="child:helper:c7:"),
    ]
    compacted, probed, stopped = timeline_lines(events, agent="a", user="u")
    assert compacted.text == "compacted seq 1 to 40 (32 rows) into a summary"
    assert compacted.compaction == {"type": "compaction", "summary": "Summary of the earlier conversation",
                                    **manifest}
    assert not compacted.folded, "the probe report is a line of its own, not a folded journal row"
    assert probed.text == "probed the summary: 600‰ lost — latched: no further compaction this episode"
    assert (probed.outcome, probed.outcome_css) == ("degraded", "outcome-error")
    assert probed.compaction is not None and probed.compaction["type"] == "probe"
    assert stopped.text == "stopped: compaction quota reached (16 of 16 compactions)" and stopped.depth == 1
    assert stopped.compaction is not None and stopped.compaction["type"] == "quota"


def test_every_event_kind_reads_in_words_of_its_own() -> None:
    """describe() matches on EventKind: a kind added without a description fails here (and in mypy)."""
    for kind in EventKind:
        description = describe(event(1, kind, {"content": "hello"}), agent="troubleshooter", user="alice")
        generic = kind.removeprefix("control:").replace("_", " ")
        assert description.text and description.text != generic, kind
        assert "control:" not in description.text, kind


def test_an_unknown_kind_still_reads_in_words() -> None:
    description = describe(event(1, "control:something_new", {}), agent="troubleshooter", user="alice")
    assert description.text == "something new" and description.who == "system"


def test_a_sub_agents_answer_reads_once_and_each_row_shows_its_duration() -> None:
    child = "child:log_analyst:"
    at = [AT + timedelta(seconds=s) for s in (0, 0.4, 2.4, 14, 200)]
    events = [
        SessionEvent(seq=1, kind="user", payload={"content": "find the errors", "author": "agent:troubleshooter"},
                     narrative=child, created_at=at[0]),
        SessionEvent(seq=2, kind="assistant", payload={"content": "Pool exhausted at 12:00."}, narrative=child,
                     created_at=at[1]),
        # The child's own call has the same key in its own narrative: it is no delegation's result.
        SessionEvent(seq=6, kind="tool_result", payload={"key": "e1:t1:c0", "name": "read_logs", "content": "log"},
                     narrative=child, created_at=at[1]),
        SessionEvent(seq=3, kind="tool_result", payload={"key": "e1:t1:c0", "name": "execute_task",
                                                         "content": "Pool exhausted at 12:00."}, created_at=at[2]),
        SessionEvent(seq=4, kind="subagent_result", payload={"key": "e1:t1:c0", "agent": "log_analyst",
                                                             "content": "Pool exhausted at 12:00.",
                                                             "outcome": "completed"}, created_at=at[3]),
        SessionEvent(seq=5, kind="canceled", payload={"reason": "stop requested"}, created_at=at[4]),
    ]
    lines = timeline_lines(events, agent="troubleshooter", user="alice")
    texts = [line.text for line in lines]
    assert sum("Pool exhausted" in text for text in texts) == 1  # the child's own line, once
    assert texts[2] == "log" and texts[3] == "returned its answer (above) to the agent that delegated"
    assert [sub.seq for sub in lines[2].folded] == [3]  # the delegating call's result is a journal row
    assert texts[4] == "the exchange was cancelled: stop requested"
    assert [line.duration for line in lines] == ["0.4 s", "0.0 s", "14 s", "3 min 6 s", ""]


def test_an_async_task_update_reads_as_a_sentence() -> None:
    done = describe(event(1, "control:task_update", {"job": 3, "agent": "log_analyst", "status": "succeeded",
                                                     "delivered": True}), agent="a", user="u")
    assert done.text == "async task #3 (log_analyst) succeeded; its result was delivered to the agent"
    queued = describe(event(2, "control:task_update", {"job": 4, "agent": "x", "status": "queued"}), agent="a",
                      user="u")
    assert queued.text == "async task #4 (x) is queued"


def test_the_run_banner_says_how_a_run_ended_in_a_sentence() -> None:
    from skald.admin.runs import banner
    from skald.models import Run, RunStatus

    said = {status: banner(Run(status=status, outcome=outcome), [], approvals_open=False)["text"]
            for status, outcome in [(RunStatus.COMPLETED, "completed"), (RunStatus.CANCELED, "canceled"),
                                    (RunStatus.FAILED, "budget_exceeded")]}
    assert said == {
        RunStatus.COMPLETED: "The agent answered and the run completed.",  # not "Completed (completed)"
        RunStatus.CANCELED: "Stopped: a person stopped it.",
        RunStatus.FAILED: "Failed: the run spent its token budget before an answer.",
    }
