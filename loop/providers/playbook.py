"""The deterministic playbook provider: the default posture when no provider is configured.

It follows an agent's playbook (data, editable in the admin): one step per provider turn after the
latest user message. A step is ``{"tool": name, "args": {...}}`` or ``{"answer": text}``. Strings
may hold ``{input}`` (the latest user message; ``{input_line}``, its first non-blank line),
``{last_result}`` and ``{results}`` (tool results
since that message). It drives real tools, so the demo shows real turns, calls and approvals.

A step marked ``"on": "task_completed"`` is not part of the sequence: it answers an exchange that
opens with a delivered async task result (a ``task_completed`` call), once; without one such an
exchange is answered with a short acknowledgement.

Asked to compact (a request from :func:`loop.compaction.prompt.summary_request`), it writes a
deterministic extractive summary, so compaction runs without a network too.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from loop.cancellation import CancelToken
from loop.compaction.extractive import extractive_summary
from loop.compaction.prompt import INTENT, is_summary_request
from loop.errors import ProviderError
from loop.providers.base import (
    AssistantMessage,
    Delta,
    Message,
    MessageEnd,
    ProviderRequest,
    SummaryMessage,
    TextDelta,
    ToolCallDelta,
    ToolResultMessage,
    UsageDelta,
    UserMessage,
)


def _render(value: Any, variables: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for name, text in variables.items():
            value = value.replace("{" + name + "}", text)
        return value
    if isinstance(value, list):
        return [_render(item, variables) for item in value]
    if isinstance(value, dict):
        return {key: _render(item, variables) for key, item in value.items()}
    return value


WORD = re.compile(r"\S+\s*|\s+")


TASK_COMPLETED = "task_completed"


def _intent(messages: Sequence[Message]) -> str:
    """The user's request as a compaction summary kept it (its last ``intent:`` line)."""
    summary = next((m.content for m in messages if isinstance(m, SummaryMessage) and m.kind == "compaction"), "")
    intents = [line[len(INTENT):] for line in summary.splitlines() if line.startswith(INTENT)]
    return intents[-1] if intents else ""


class PlaybookProvider:
    """Answers stream word by word (``word_pause`` seconds apart, through the injected ``sleep``)
    so that a newcomer watching the console sees a turn arrive as a real model's would."""

    name = "playbook"

    def __init__(self, playbook: Sequence[Mapping[str, Any]], *, word_pause: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.playbook = [step for step in playbook if step.get("on") != TASK_COMPLETED]
        self.on_task = next((step for step in playbook if step.get("on") == TASK_COMPLETED), None)
        self.word_pause = word_pause
        self.sleep = sleep

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        if cancel.cancelled:
            raise ProviderError("canceled", code="provider_canceled")
        if is_summary_request(request):  # not streamed word by word: nobody watches a summary being written
            transcript = request.messages[0].content if request.messages else ""
            summary = extractive_summary(transcript, max_tokens=request.max_output_tokens or 2_000)
            usage_in = sum(len(m.content) for m in request.messages) // 4 + len(request.system) // 4
            return iter([TextDelta(summary), UsageDelta(usage_in, len(summary) // 4 + 1), MessageEnd("stop")])
        step_index, variables = self._position(request)
        deltas = self._task_answer(variables) if step_index < 0 else self._step(step_index, variables)
        usage_in = sum(len(m.content) for m in request.messages) // 4 + len(request.system) // 4
        usage_out = sum(len(getattr(d, "text", "") or getattr(d, "arguments", "")) for d in deltas) // 4 + 1
        return self._words([*deltas, UsageDelta(usage_in, usage_out), MessageEnd(self._finish(deltas))], cancel)

    def _words(self, deltas: list[Delta], cancel: CancelToken) -> Iterator[Delta]:
        for delta in deltas:
            if not isinstance(delta, TextDelta):
                yield delta
                continue
            for index, word in enumerate(WORD.findall(delta.text)):
                if index and self.word_pause:
                    self.sleep(self.word_pause)
                    if cancel.cancelled:  # a stop lands between words, as it would mid-stream
                        raise ProviderError("canceled", code="provider_canceled")
                yield TextDelta(word)

    @staticmethod
    def _finish(deltas: list[Delta]) -> str:
        return "tool_calls" if any(isinstance(d, ToolCallDelta) for d in deltas) else "stop"

    @staticmethod
    def _position(request: ProviderRequest) -> tuple[int, dict[str, str]]:
        last_user = max((i for i, m in enumerate(request.messages) if isinstance(m, UserMessage)), default=-1)
        after = request.messages[last_user + 1:]
        steps_done = sum(1 for m in after if isinstance(m, AssistantMessage))
        step = request.metadata.get("step")
        if last_user < 0 and isinstance(step, int):
            # A compaction summarised this exchange's start: the frame's step number says where we are.
            steps_done = step - 1
        results = [m.content for m in after if isinstance(m, ToolResultMessage)]
        user_text = request.messages[last_user].content if last_user >= 0 else _intent(request.messages)
        variables = {
            "input": user_text,
            "input_line": next((line.strip() for line in user_text.splitlines() if line.strip()), ""),
            "last_result": results[-1] if results else "",
            "results": "\n\n".join(results),
        }
        first = next((m for m in after if isinstance(m, AssistantMessage)), None)
        if first is not None and any(call.name == TASK_COMPLETED for call in first.tool_calls):
            return -1, variables  # a delivered async result opens this exchange
        return steps_done, variables

    def _task_answer(self, variables: Mapping[str, str]) -> list[Delta]:
        step = self.on_task or {"answer": "Noted the async task's result:\n{last_result}"}
        return [TextDelta(str(_render(step.get("answer", ""), variables)))]

    def _step(self, index: int, variables: Mapping[str, str]) -> list[Delta]:
        if index >= len(self.playbook):
            summary = variables["last_result"][:500]
            return [TextDelta("Playbook complete." + (f" Last result: {summary}" if summary else ""))]
        step = self.playbook[index]
        if "answer" in step:
            return [TextDelta(str(_render(step["answer"], variables)))]
        if "tool" in step:
            arguments = _render(step.get("args", {}), variables)
            return [ToolCallDelta(index=0, id=f"playbook_{index}", name=str(step["tool"]),
                                  arguments=json.dumps(arguments, ensure_ascii=False))]
        raise ProviderError(f"playbook step {index + 1} has neither 'tool' nor 'answer'", code="playbook_invalid")
