"""A crashed turn's dangling calls are repaired, visibly, before the session moves on (SPEC R3)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from loop.models import Exchange, ExchangeStatus, ToolCall, ToolCallStatus
from loop.providers.base import ToolResultMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.recovery import INTERRUPTED_RESULT
from skald.agents.seed import seed_agents
from skald.core import clock
from skald.loop_adapters import runtime
from skald.sessions.services import session_create, session_message_submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def test_a_message_after_a_worker_died_mid_call_repairs_the_dangling_call_first(alice, settings, tmp_path):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    seed_agents()
    session = session_create(user=alice, agent="troubleshooter")
    crash = LoopbackProvider([tool_turn(("read_file", {"path": "notes.md"}))])
    runtime.set_provider_factory(lambda agent: crash)
    try:
        # The worker "dies" after journaling the call: simulate by admitting and driving only the
        # message end + intent, then leaving the claim behind.
        from loop.driver import admit_exchange
        from skald.loop_adapters.runtime import build_env

        env = build_env(session)
        exchange, _ = admit_exchange(env, request_key="crashed", content="look", claim_token="dead-worker")
        frame = env.store.exchanges.root_frame(exchange)
        from loop.providers.base import fold_deltas

        env.store.exchanges.record_message_end(exchange=exchange, frame=frame, turn=1,
                                               assembled=fold_deltas(crash.turns[0]), principal=env.principal,
                                               spent_tokens=0, journal=1)
        Exchange.objects.filter(pk=exchange.pk).update(claimed_at=clock.now() - timedelta(hours=2))
        assert ToolCall.objects.get().status == ToolCallStatus.RUNNING

        later = LoopbackProvider([text_turn("the earlier read was interrupted; retrying later")])
        runtime.set_provider_factory(lambda agent: later)
        new, _ = session_message_submit(user=alice, session=session, content="and now?")
    finally:
        runtime.set_provider_factory(None)
    crashed = Exchange.objects.get(pk=exchange.pk)
    assert (crashed.status, crashed.error_code) == (ExchangeStatus.BROKEN, "worker_lost")
    call = ToolCall.objects.get(exchange=crashed)
    assert call.status == ToolCallStatus.INTERRUPTED and call.result == INTERRUPTED_RESULT
    seen = later.calls[0].messages
    assert ToolResultMessage(call_id=call.call_key, name="read_file", content=INTERRUPTED_RESULT, is_error=True) in seen
    assert Exchange.objects.get(pk=new.pk).outcome == "completed"


def test_a_fresh_claim_is_not_a_crash(alice, settings):
    settings.SKALD_SYNC_TASKS = False
    seed_agents()
    session = session_create(user=alice, agent="troubleshooter")
    from loop.driver import admit_exchange
    from skald.loop_adapters.runtime import build_env

    admit_exchange(build_env(session), request_key="busy", content="x", claim_token="live-worker")
    from skald.core.errors import Conflict

    with pytest.raises(Conflict):
        session_message_submit(user=alice, session=session, content="again")
    assert Exchange.objects.get(request_key="busy").status == ExchangeStatus.OPEN


def test_the_minute_sweep_repairs_a_crashed_run_nobody_messages_again(alice, settings, tmp_path):
    from audit.actors import Actor
    from loop.driver import admit_exchange
    from skald.cases.services import case_create
    from skald.core.ids import new_token
    from skald.loop_adapters.runtime import build_env
    from skald.models import Run, RunStatus
    from skald.tasks import repair_stale_exchanges

    settings.SKALD_SYNC_TASKS = False
    seed_agents()
    session = session_create(user=alice, agent="troubleshooter")
    case = case_create(actor=Actor.system("t"), title="c")
    now = clock.now()
    Run.objects.create(case=case, session=session, ticket="t", launched_by=alice, launch_key=new_token(),
                       status=RunStatus.RUNNING, created_at=now, updated_at=now)
    exchange, _ = admit_exchange(build_env(session), request_key="k", content="go", claim_token="dead")
    Exchange.objects.filter(pk=exchange.pk).update(claimed_at=now - timedelta(hours=1))
    assert repair_stale_exchanges() == 1
    assert Exchange.objects.get(pk=exchange.pk).error_code == "worker_lost"
    assert Run.objects.get().status == RunStatus.FAILED
    assert repair_stale_exchanges() == 0
