"""The incremental context window matches a fresh projection of the bounded replay."""

from __future__ import annotations

import pytest

from loop.bounds import Bounds
from loop.context import ContextBuilder, mask_for_provider
from loop.driver import run_turns_keyed
from loop.projection import project, window_start
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def fresh(store, session_id: int, cap: int):
    rows, capped, _stamp = store.replay(session_id, cap=cap)
    return project(rows[window_start(rows, capped=capped):], mask=mask_for_provider)


def test_the_window_follows_a_long_session_within_the_cap(make_env, session):
    cap = 12
    provider = LoopbackProvider([tool_turn(("echo", {"text": "x"})), text_turn("ok")] * 15)
    env = make_env(provider, bounds=Bounds(replay_cap=cap), context=ContextBuilder())
    for number in range(15):
        run_turns_keyed(env, request_key=f"k{number}", content=f"mail me at user{number}@example.org")
        messages, size = env.context.window(env.store, session.pk, narrative="", cap=cap)
        assert messages == fresh(env.store, session.pk, cap)
        assert len(messages) <= cap
        assert messages[0].role == "user" and "[email]" in messages[0].content
        assert size == sum(len(m.content.encode()) for m in messages) + sum(
            len(c.arguments.encode()) + len(c.name) + len(c.id) for m in messages for c in getattr(m, "tool_calls", ())
        ) + sum(len(getattr(m, "call_id", "")) for m in messages) + 16 * len(messages)
    provider.assert_complete()


def test_the_model_never_sees_more_than_the_replay_cap(make_env, session):
    provider = LoopbackProvider([text_turn("ok")] * 30)
    env = make_env(provider, bounds=Bounds(replay_cap=8))
    for number in range(30):
        run_turns_keyed(env, request_key=f"k{number}", content=f"message {number}")
    assert all(len(request.messages) <= 8 for request in provider.calls)
    assert provider.calls[-1].messages[-1].content == "message 29"


def test_a_new_session_under_a_reused_id_never_sees_the_old_sessions_window(make_env, session, store, alice):
    """SQLite hands a deleted session's id out again; the process's cached window of the old session
    must not be continued for the new one (its first look replays from the store)."""
    from dataclasses import replace

    from loop.models import Session

    context = ContextBuilder()
    old = LoopbackProvider([text_turn("noted")])
    run_turns_keyed(make_env(old, context=context), request_key="k1", content="the old secret plan")
    session_id = session.pk
    Session.objects.filter(pk=session_id).delete()
    reborn = Session.objects.create(pk=session_id, owner=alice, agent="tester", source="web", title="new",
                                    created_at=store.journal.now())
    assert reborn.pk == session_id

    new = LoopbackProvider([text_turn("hello")])
    env = make_env(new, context=context)
    run_turns_keyed(replace(env, scope=replace(env.scope, session_id=reborn.pk)), request_key="k1",
                    content="a fresh start")
    seen = [message.content for message in new.calls[0].messages]
    assert seen == ["a fresh start"]
