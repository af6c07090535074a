"""The one seam where narrative text enters a provider request (loop.projection) withholds every
credential, whichever path wrote the row — so a path added later is covered by construction."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loop.driver import InputRefused, LoopEnv, run_turns
from loop.outcomes import Completed
from loop.projection import EventRow, call_key, project
from loop.providers.base import ProviderRequest
from loop.providers.loopback import LoopbackProvider, text_turn
from loop.tripwires import OrgPattern, organisation_detector
from tests.loop.tripwire_corpus import fakes

SECRET = next(f.snippet for f in fakes() if f.kind == "gitlab-pat")
KEY = call_key(1, 1, 0)


def _rows(secret: str) -> list[EventRow]:
    """One row of every conversational kind, each carrying ``secret``."""
    return [
        EventRow(1, "compaction", {"summary": f"earlier: the deploy used {secret}", "manifest": {}}),
        EventRow(2, "user", {"content": f"scratchpad says {secret}"}),
        EventRow(3, "assistant", {"content": f"I will try {secret}", "turn": 1, "tool_calls": [
            {"key": KEY, "id": "p1", "name": "scratchpad_set", "arguments": f'{{"value": "{secret}"}}'}]}),
        EventRow(4, "tool_result", {"key": KEY, "name": "scratchpad_set", "content": f"stored {secret}"}),
        EventRow(5, "subagent_result", {"key": KEY, "agent": "child", "content": f"child found {secret}",
                                        "outcome": "completed"}),
    ]


def _texts(messages: tuple[object, ...]) -> list[str]:
    texts = []
    for message in messages:
        texts.append(message.content)  # type: ignore[attr-defined]
        texts += [call.arguments for call in getattr(message, "tool_calls", ())]
    return texts


def test_every_kind_of_row_is_withheld_at_the_seam() -> None:
    texts = _texts(project(_rows(SECRET)))

    assert len(texts) >= 5  # a sub-agent result may fold into its call's tool message
    for text in texts:
        assert SECRET not in text
        assert "withheld: it matched credential tripwires (gitlab-pat)" in text


def test_the_seam_applies_the_organisation_rules_it_is_given() -> None:
    secret = "ACME-7F3A9C2E5B1D4F60A8B7C6D5"
    guard = organisation_detector([OrgPattern("acme-key", r"ACME-[0-9A-F]{24}", ("acme-",))])

    assert all(secret in text for text in _texts(project(_rows(secret)))) is True
    assert all(secret not in text and "org:acme-key" in text for text in _texts(project(_rows(secret), guard=guard)))


@pytest.mark.django_db(transaction=True)
def test_admission_refuses_with_the_kinds_and_stores_nothing(make_env: Callable[..., LoopEnv]) -> None:
    provider = LoopbackProvider([text_turn("never")])
    env = make_env(provider)

    with pytest.raises(InputRefused) as refused:
        run_turns(env, content=f"alice here, my token is {SECRET}")

    assert refused.value.kinds == ("gitlab-pat",)
    assert SECRET not in str(refused.value)
    assert provider.calls == []
    assert env.store.replay(env.scope.session_id, narrative="", cap=100)[0] == []


@pytest.mark.django_db(transaction=True)
def test_a_rule_added_between_turns_withholds_history_already_in_the_window(
    make_env: Callable[..., LoopEnv],
) -> None:
    secret = "ACME-7F3A9C2E5B1D4F60A8B7C6D5"
    provider = LoopbackProvider([text_turn("noted"), text_turn("ok")])
    assert run_turns(make_env(provider), content=f"the ticket key is {secret}").outcome == Completed("noted")

    guard = organisation_detector([OrgPattern("acme-key", r"ACME-[0-9A-F]{24}", ("acme-",))])
    run_turns(make_env(provider, detector=guard), content="and now?")

    first, second = provider.calls
    assert secret in _request_text(first)
    assert secret not in _request_text(second) and "org:acme-key" in _request_text(second)


def _request_text(request: ProviderRequest) -> str:
    return request.system + "\n".join(_texts(request.messages))
