"""The summary request: a dedicated system prompt and the covered messages rendered as a transcript,
with tool-result clearing and selective retention applied (SPEC L14).

* **Tool-result clearing**: old, bulky tool results are the first to go. A covered tool result over
  ``clear_tool_results_over`` tokens reaches the summariser as a stub (tool, size) plus its salient
  lines (errors, warnings, failures), never its full bytes.
* **Selective retention**: what a later turn needs is pulled out before the transcript, under
  ``MUST KEEP``: the user's intent (every user message), the decisions the assistant announced and
  the open questions (sentences ending in ``?``), so the summariser sees them first and whole.

The summariser is the loop's own provider; the deterministic playbook provider answers this request
with :func:`loop.compaction.extractive.extractive_summary` over the same transcript.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from loop.compaction.tokens import count_tokens
from loop.providers.base import (
    AssistantMessage,
    Message,
    ProviderRequest,
    SummaryMessage,
    ToolResultMessage,
    UserMessage,
)

PURPOSE = "compaction"
SYSTEM_PROMPT = (
    "You compact the history of an agent's conversation so the agent can continue without it.\n"
    "Write a summary that the agent will read instead of the covered messages. Keep, in this order:\n"
    "1. Intent: what the user asked for and any constraints they set.\n"
    "2. Decisions: what was decided or concluded, and why, in one line each.\n"
    "3. Open questions and next steps that are still pending.\n"
    "4. Facts the agent will need again, copied exactly: file paths, error strings, identifiers, "
    "numbers, versions, hosts.\n"
    "Do not copy bulky tool output; cleared results are marked and their salient lines are given. "
    "Do not invent anything that is not in the transcript. Write plain text, no preamble."
)
MUST_KEEP = "MUST KEEP"
INTENT = "intent: "
TRANSCRIPT = "TRANSCRIPT"
_SALIENT_LINE = re.compile(r"error|exception|fail|fatal|warn|denied|refused|timeout|traceback|exit (?:code|status)",
                           re.IGNORECASE)
_DECISION = re.compile(r"\b(?:decid|conclu|root cause|will |plan|fix|chose|agreed|must |should )", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_MAX_SALIENT_LINES = 6
_LINE_CHARS = 240


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    cleared: int  # tool results sent as stubs


def _salient_lines(text: str) -> list[str]:
    lines = [line.strip()[:_LINE_CHARS] for line in text.splitlines() if _SALIENT_LINE.search(line)]
    return lines[:_MAX_SALIENT_LINES]


def retained(messages: Sequence[Message]) -> tuple[list[str], list[str], list[str]]:
    """Intent, decisions and open questions found in ``messages`` (selective retention)."""
    intent, decisions, questions = [], [], []
    for message in messages:
        if isinstance(message, UserMessage):
            intent.append(" ".join(message.content.split())[:_LINE_CHARS * 2])
        if isinstance(message, UserMessage | AssistantMessage):
            for sentence in _SENTENCE.findall(message.content):
                sentence = " ".join(sentence.split())
                if sentence.endswith("?"):
                    questions.append(sentence[:_LINE_CHARS])
                elif isinstance(message, AssistantMessage) and _DECISION.search(sentence):
                    decisions.append(sentence[:_LINE_CHARS])
    return intent, decisions, questions


def render_transcript(messages: Sequence[Message], *, clear_over: int) -> Transcript:
    """The covered messages as the summariser reads them."""
    intent, decisions, questions = retained(messages)
    keep = [f"{MUST_KEEP}:"]
    keep += [f"- {INTENT}{line}" for line in intent]
    keep += [f"- decision: {line}" for line in decisions]
    keep += [f"- open question: {line}" for line in questions]
    lines = ["", f"{TRANSCRIPT}:"]
    cleared = 0
    for message in messages:
        if isinstance(message, SummaryMessage):
            lines.append(f"EARLIER SUMMARY:\n{message.content}")
        elif isinstance(message, UserMessage):
            lines.append(f"USER: {message.content}")
        elif isinstance(message, AssistantMessage):
            calls = "".join(f"\n  CALLED {c.name} {c.arguments}" for c in message.tool_calls)
            lines.append(f"ASSISTANT: {message.content}{calls}")
        elif isinstance(message, ToolResultMessage):
            tokens = count_tokens(message.content)
            label = f"TOOL RESULT {message.name}{' (error)' if message.is_error else ''}"
            if tokens > clear_over:
                cleared += 1
                salient = "".join(f"\n  | {line}" for line in _salient_lines(message.content))
                lines.append(f"{label} [cleared: {tokens} tokens]{salient}")
            else:
                lines.append(f"{label}: {message.content}")
    return Transcript("\n".join(keep + lines), cleared)


def summary_request(transcript: Transcript, *, max_output_tokens: int, metadata: dict[str, object]) -> ProviderRequest:
    """The provider request that asks for a summary: dedicated prompt, no tools, temperature 0."""
    return ProviderRequest(system=SYSTEM_PROMPT, messages=(UserMessage(content=transcript.text),), tools=(),
                           max_output_tokens=max_output_tokens, metadata={**metadata, "purpose": PURPOSE})


def is_summary_request(request: ProviderRequest) -> bool:
    return request.metadata.get("purpose") == PURPOSE
