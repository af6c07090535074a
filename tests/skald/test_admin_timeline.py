"""The run timeline reads as words: one line per event, journal rows folded, children indented."""

from __future__ import annotations

from datetime import UTC, datetime

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
