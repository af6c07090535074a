"""The playbook provider streams an answer word by word, pausing through its injected sleep, and a
stop between two words ends the stream."""

from __future__ import annotations

import pytest

from loop.cancellation import CancelToken
from loop.errors import ProviderError
from loop.providers.base import MessageEnd, ProviderRequest, TextDelta, UserMessage, fold_deltas
from loop.providers.playbook import PlaybookProvider

ANSWER = "The pool is exhausted after the deploy."


def _request() -> ProviderRequest:
    return ProviderRequest(system="", messages=(UserMessage("why 502?"),))


def test_it_streams_an_answer_word_by_word_with_a_pause_between_words() -> None:
    pauses: list[float] = []
    provider = PlaybookProvider([{"answer": ANSWER}], word_pause=0.02, sleep=pauses.append)
    deltas = list(provider.stream(_request(), cancel=CancelToken()))
    words = [d.text for d in deltas if isinstance(d, TextDelta)]
    assert words == ["The ", "pool ", "is ", "exhausted ", "after ", "the ", "deploy."]
    assert pauses == [0.02] * (len(words) - 1)
    assert isinstance(deltas[-1], MessageEnd) and fold_deltas(deltas).text == ANSWER


def test_a_stop_between_words_ends_the_stream() -> None:
    cancel = CancelToken()
    provider = PlaybookProvider([{"answer": ANSWER}], word_pause=0.01, sleep=lambda _: cancel.cancel())
    stream = provider.stream(_request(), cancel=cancel)
    assert next(stream) == TextDelta("The ")
    with pytest.raises(ProviderError) as refused:
        next(stream)
    assert refused.value.code == "provider_canceled"
