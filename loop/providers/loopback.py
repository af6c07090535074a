"""``LoopbackProvider``: scripted turns with a call log, for tests and benchmarks only."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from loop.cancellation import CancelToken
from loop.errors import ProviderError
from loop.providers.base import (
    Delta,
    MessageEnd,
    ProviderRequest,
    TextDelta,
    ToolCallDelta,
    UsageDelta,
)

Script = Sequence[Delta] | Callable[[ProviderRequest], Sequence[Delta]] | Exception


def text_turn(text: str, *, usage: tuple[int, int] = (10, 5)) -> list[Delta]:
    return [TextDelta(text), UsageDelta(*usage), MessageEnd("stop")]


def tool_turn(*calls: tuple[str, dict[str, Any]], text: str = "", usage: tuple[int, int] = (10, 5)) -> list[Delta]:
    deltas: list[Delta] = [TextDelta(text)] if text else []
    for index, (name, arguments) in enumerate(calls):
        deltas.append(ToolCallDelta(index=index, id=f"call_{index}", name=name, arguments=json.dumps(arguments)))
    deltas += [UsageDelta(*usage), MessageEnd("tool_calls")]
    return deltas


@dataclass
class LoopbackProvider:
    """Plays ``turns`` in order; each is a delta list, a function of the request, or an exception.

    ``delay`` sleeps between deltas (through the cancel token, so a stop interrupts it).
    """

    turns: list[Script]
    delay: float = 0.0
    repeat_last: bool = False
    name: str = "loopback"
    calls: list[ProviderRequest] = field(default_factory=list)

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        self.calls.append(request)
        index = len(self.calls) - 1
        if index >= len(self.turns):
            if not (self.repeat_last and self.turns):
                raise ProviderError(f"loopback script has no turn {index + 1}", code="loopback_exhausted")
            index = len(self.turns) - 1
        script = self.turns[index]
        if isinstance(script, Exception):
            raise script
        deltas = script(request) if callable(script) else script
        return self._play(list(deltas), cancel)

    def _play(self, deltas: list[Delta], cancel: CancelToken) -> Iterator[Delta]:
        for delta in deltas:
            if self.delay and cancel.wait(self.delay):
                raise ProviderError("canceled", code="provider_canceled")
            if cancel.cancelled:
                raise ProviderError("canceled", code="provider_canceled")
            yield delta

    def assert_complete(self) -> None:
        if not self.repeat_last and len(self.calls) != len(self.turns):
            raise AssertionError(f"loopback played {len(self.calls)} of {len(self.turns)} scripted turns")


