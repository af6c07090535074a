"""The summary request: tool-result clearing, selective retention, and the playbook's summary."""

from __future__ import annotations

from loop.cancellation import CancelToken
from loop.compaction.extractive import extractive_summary
from loop.compaction.probes import draw_probes, score
from loop.compaction.prompt import SYSTEM_PROMPT, is_summary_request, render_transcript, summary_request
from loop.providers.base import (
    AssistantMessage,
    SummaryMessage,
    ToolCallRequest,
    ToolResultMessage,
    UserMessage,
    fold_deltas,
)
from loop.providers.playbook import PlaybookProvider

BULKY = "\n".join([f"2026-11-30T22:{n:02d}:00 INFO request served in {n} ms" for n in range(60)]
                  + ["2026-11-30T23:00:00 ERROR TimeoutError: upstream /srv/api/handler.py timed out"])
MESSAGES = [
    SummaryMessage(kind="compaction", content="Earlier: the user runs shop-api on host web-3."),
    UserMessage("Why does shop-api return HTTP 504? Keep the fix minimal."),
    AssistantMessage("I will read the access log.", tool_calls=(
        ToolCallRequest("e1:t1:c0", "read_logs", '{"path": "/var/log/shop/access.log"}'),)),
    ToolResultMessage("e1:t1:c0", "read_logs", BULKY),
    ToolResultMessage("e1:t1:c1", "echo", "small result 42"),
    AssistantMessage("I decided to raise the upstream timeout. Should we also alert on p99?"),
]


def test_bulky_old_tool_results_reach_the_summariser_as_a_stub_with_their_salient_lines():
    transcript = render_transcript(MESSAGES, clear_over=100)
    assert transcript.cleared == 1
    assert "INFO request served" not in transcript.text
    assert "[cleared:" in transcript.text and "TimeoutError: upstream /srv/api/handler.py" in transcript.text
    assert "small result 42" in transcript.text  # a small result stays whole


def test_intent_decisions_and_open_questions_are_kept_up_front():
    text = render_transcript(MESSAGES, clear_over=100).text
    head = text.split("TRANSCRIPT:")[0]
    assert "- intent: Why does shop-api return HTTP 504? Keep the fix minimal." in head
    assert "- decision: I decided to raise the upstream timeout." in head
    assert "- open question: Should we also alert on p99?" in head
    assert "EARLIER SUMMARY:\nEarlier: the user runs shop-api on host web-3." in text


def test_the_request_has_the_dedicated_prompt_no_tools_and_temperature_zero():
    request = summary_request(render_transcript(MESSAGES, clear_over=100), max_output_tokens=500,
                              metadata={"exchange": 3})
    assert request.system == SYSTEM_PROMPT and request.tools == () and request.temperature == 0.0
    assert is_summary_request(request) and request.metadata["exchange"] == 3 and request.max_output_tokens == 500


def test_the_playbook_provider_writes_a_deterministic_summary():
    request = summary_request(render_transcript(MESSAGES, clear_over=100), max_output_tokens=500, metadata={})
    provider = PlaybookProvider([{"answer": "never used for a summary"}])
    first = fold_deltas(provider.stream(request, cancel=CancelToken()))
    second = fold_deltas(provider.stream(request, cancel=CancelToken()))
    assert first.text == second.text and first.ended and first.has_usage
    assert "never used" not in first.text
    assert "Keep the fix minimal" in first.text and "TimeoutError" in first.text


def test_the_extractive_summary_stays_under_its_token_budget():
    transcript = render_transcript(MESSAGES * 20, clear_over=100).text
    from loop.compaction.tokens import count_tokens

    assert count_tokens(extractive_summary(transcript, max_tokens=120)) <= 120


def test_what_clearing_drops_the_probes_score_as_lost():
    quiet = "\n".join(["INFO batch ok"] * 80 + ["INFO checksum sha_9f3c2a7b1d stored"])  # no salient line
    messages: list = []
    for n in range(10):
        messages.append(UserMessage(f"step {n}: check disk_{n}"))
        if n == 5:
            messages.append(ToolResultMessage(f"e{n}:t1:c0", "read_logs", quiet))
    texts = [m.content for m in messages]
    transcript = render_transcript(messages, clear_over=100)
    assert transcript.cleared == 1 and "sha_9f3c2a7b1d" not in transcript.text
    report = score(draw_probes(texts), before="\n".join(texts), summary=extractive_summary(transcript.text))
    lost = [p["text"] for p in report.as_payload()["probes"] if p["pre"] and not p["post"]]
    assert lost == ["sha_9f3c2a7b1d"] and report.result == "ok" and report.lost_permille == 100


def test_the_playbook_continues_when_its_exchange_start_was_summarised():
    provider = PlaybookProvider([{"tool": "echo", "args": {"text": "{input}"}}, {"answer": "step two for {input}"}])
    summary = SummaryMessage(kind="compaction", content="Summary.\nintent: restart shop-api on web-3\nFacts: web-3")
    request = summary_request(render_transcript([], clear_over=100), max_output_tokens=100, metadata={})
    # The exchange's turn counts every frame's (a delegate's too); the frame's own step says where it is.
    request = type(request)(system="s", messages=(summary,), metadata={"turn": 7, "step": 2})
    turn = fold_deltas(provider.stream(request, cancel=CancelToken()))
    assert turn.text == "step two for restart shop-api on web-3"
