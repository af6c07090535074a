"""Restart recovery (SPEC R1-R3): a crash loses memory, never truth.

Each test leaves the rows a worker killed at some point would leave (the store's own writes, a
claim whose lease then lapses on the test clock) and lets recovery continue from them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest
from django.db import connection

from loop.driver import run_turns_keyed
from loop.errors import LeaseLost, PayloadTooLarge
from loop.models import Exchange, ExchangeStatus, SessionEvent, ToolCall, ToolCallStatus
from loop.outcomes import AwaitingHuman, Canceled, Completed
from loop.ports import ToolContext
from loop.providers.base import fold_deltas
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.recovery import INTERRUPTED_RESULT, ResolverBusy, recover_exchange, resolve_pending
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool, ToolRegistry
from loop.verify import load_session_rows, verify_rows
from tests.loop.conftest import ECHO
from tests.loop.fakes import Effects, Held, ScriptedGate, approve_in_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

LEASE = 30.0


def crashed_mid_round(env, *calls, claim: str = "dead-worker", journal: int = 1):
    """An exchange whose worker died after the message end (and the first call's intent)."""
    exchange = env.store.exchanges.admit(session_id=env.scope.session_id, request_key="crashed", content="go",
                                         principal=env.principal, config={}, claim_token=claim).exchange
    frame = env.store.exchanges.root_frame(exchange)
    planned = env.store.exchanges.record_message_end(exchange=exchange, frame=frame, turn=1,
                                                     assembled=fold_deltas(tool_turn(*calls)), principal=env.principal,
                                                     spent_tokens=0, journal=journal)
    return exchange, [call for call, _ in planned]


def test_a_live_lease_is_never_taken_over(make_env, store, clock):
    env = make_env(LoopbackProvider([text_turn("never")]))
    exchange, _ = crashed_mid_round(env, ("echo", {"text": "x"}))
    clock.advance(LEASE - 1)
    assert recover_exchange(env, exchange.pk, claim_token="rescuer") is None  # no double driving
    assert Exchange.objects.get(pk=exchange.pk).claim_token == "dead-worker"


def test_a_renewed_lease_stays_with_its_driver(make_env, store, clock):
    env = make_env(LoopbackProvider([text_turn("never")]))
    exchange, _ = crashed_mid_round(env, ("echo", {"text": "x"}), claim="alive")
    clock.advance(LEASE - 1)
    assert store.exchanges.renew(exchange.pk, "alive")
    clock.advance(LEASE - 1)
    assert not store.exchanges.claim_for_recovery(exchange.pk, "rescuer", principal="system:test")
    assert not store.exchanges.renew(exchange.pk, "someone-else")


def test_a_lapsed_lease_is_recovered_and_a_rerun_call_is_regated_and_run_again(make_env, clock):
    effect = Effects("fetch")
    gate = ScriptedGate()
    provider = LoopbackProvider([text_turn("fetched")])
    env = make_env(provider, tools=ToolRegistry([effect.tool]), gate=gate)
    exchange, (call,) = crashed_mid_round(env, ("fetch", {}))
    assert ToolCall.objects.get(pk=call.pk).status == ToolCallStatus.RUNNING
    clock.advance(LEASE + 1)

    result = recover_exchange(env, exchange.pk, claim_token="rescuer")

    assert result.outcome == Completed(answer="fetched")
    assert [checked.key for checked in gate.checked] == [call.call_key]  # the rules may have changed
    assert effect.runs == 1
    recovered = ToolCall.objects.get(pk=call.pk)
    assert (recovered.status, recovered.result) == (ToolCallStatus.COMPLETED, "fetch #1")
    assert provider.calls[0].messages[-1].content == "fetch #1"
    assert verify_rows(load_session_rows(exchange.session_id)) == []


def test_a_mark_interrupted_call_gets_a_typed_result_and_never_runs_again(make_env, clock):
    command = Effects("execute_cmd", RestartHint.MARK_INTERRUPTED)
    provider = LoopbackProvider([text_turn("I will not retry it")])
    env = make_env(provider, tools=ToolRegistry([command.tool]))
    exchange, (call,) = crashed_mid_round(env, ("execute_cmd", {}))
    clock.advance(LEASE + 1)

    result = recover_exchange(env, exchange.pk, claim_token="rescuer")

    assert isinstance(result.outcome, Completed)
    assert command.runs == 0
    interrupted = ToolCall.objects.get(pk=call.pk)
    assert (interrupted.status, interrupted.result) == (ToolCallStatus.INTERRUPTED, INTERRUPTED_RESULT)
    assert provider.calls[0].messages[-1].is_error


def test_a_planned_call_that_never_started_runs_even_when_it_must_not_run_twice(make_env, clock):
    command = Effects("execute_cmd", RestartHint.MARK_INTERRUPTED)
    env = make_env(LoopbackProvider([text_turn("ran")]), tools=ToolRegistry([command.tool, ECHO]))
    exchange, _calls = crashed_mid_round(env, ("echo", {"text": "first"}), ("execute_cmd", {}))
    clock.advance(LEASE + 1)
    recover_exchange(env, exchange.pk, claim_token="rescuer")
    assert command.runs == 1  # it was only planned: no intent, so no effect had happened
    assert [c.status for c in ToolCall.objects.filter(exchange=exchange).order_by("index")] == [
        ToolCallStatus.COMPLETED, ToolCallStatus.COMPLETED]


def test_recovery_regates_a_call_the_rules_now_require_approval_for(make_env, clock):
    gate = ScriptedGate(require={"echo"})
    env = make_env(LoopbackProvider([]), gate=gate)
    exchange, (call,) = crashed_mid_round(env, ("echo", {"text": "x"}))
    clock.advance(LEASE + 1)
    result = recover_exchange(env, exchange.pk, claim_token="rescuer")
    assert isinstance(result.outcome, AwaitingHuman)
    assert ToolCall.objects.get(pk=call.pk).status == ToolCallStatus.AWAITING_HUMAN
    assert Exchange.objects.get(pk=exchange.pk).status == ExchangeStatus.PARKED


def test_an_awaiting_call_is_re_asked_not_re_requested(make_env, clock):
    gate = ScriptedGate(require={"echo"})
    env = make_env(LoopbackProvider([tool_turn(("echo", {"text": "x"}))]), gate=gate)
    parked = run_turns_keyed(env, request_key="k", content="x")
    assert isinstance(parked.outcome, AwaitingHuman) and len(gate.parked) == 1
    clock.advance(LEASE + 1)
    result = recover_exchange(env, parked.exchange_id, claim_token="rescuer")
    assert isinstance(result.outcome, AwaitingHuman)
    assert len(gate.parked) == 1  # the card it had is the card it keeps
    exchange = Exchange.objects.get(pk=parked.exchange_id)
    assert (exchange.status, exchange.claim_token) == (ExchangeStatus.PARKED, "")


def test_a_crash_after_the_approval_was_taken_is_finished_with_the_gate_skipped(make_env, store, clock):
    effect = Effects("deploy")
    gate = ScriptedGate(require={"deploy"})
    provider = LoopbackProvider([tool_turn(("deploy", {})), text_turn("deployed")])
    env = make_env(provider, tools=ToolRegistry([effect.tool]), gate=gate)
    parked = run_turns_keyed(env, request_key="k", content="deploy")
    call = ToolCall.objects.select_related("frame").get(exchange_id=parked.exchange_id)
    # The resolver took the answer (claim + take) and died before the call's result.
    assert store.exchanges.claim_for_recovery(parked.exchange_id, "dead-resolver", principal="user:1")
    assert store.calls.take_awaiting(call, to_status=ToolCallStatus.APPROVED, principal="user:1")
    clock.advance(LEASE + 1)
    checked_before = len(gate.checked)

    result = recover_exchange(env, parked.exchange_id, claim_token="rescuer")

    assert result.outcome == Completed(answer="deployed")
    assert effect.runs == 1 and len(gate.checked) == checked_before  # the human decided it
    assert ToolCall.objects.get(pk=call.pk).status == ToolCallStatus.COMPLETED


def test_an_answered_call_is_resolved_once_and_the_exchange_driven_on(make_env, store):
    effect = Effects("deploy")
    env = make_env(LoopbackProvider([tool_turn(("deploy", {})), text_turn("done")]),
                   tools=ToolRegistry([effect.tool]), gate=ScriptedGate(require={"deploy"}))
    parked = run_turns_keyed(env, request_key="k", content="deploy")
    call = ToolCall.objects.select_related("frame").get(exchange_id=parked.exchange_id)
    result = resolve_pending(env, call, resolution="approve", reason="", claim_token="resolver")
    assert result.outcome == Completed(answer="done") and effect.runs == 1
    again = ToolCall.objects.select_related("frame").get(pk=call.pk)
    assert resolve_pending(env, again, resolution="approve", reason="", claim_token="late") is None
    assert effect.runs == 1


def test_a_second_resolver_waits_while_another_holds_the_exchange(make_env, store):
    env = make_env(LoopbackProvider([tool_turn(("echo", {"text": "a"}), ("nap", {}))]),
                   gate=ScriptedGate(require={"echo", "nap"}))
    parked = run_turns_keyed(env, request_key="k", content="x")
    _first, second = ToolCall.objects.select_related("frame").filter(exchange_id=parked.exchange_id).order_by("index")
    assert store.exchanges.claim_for_recovery(parked.exchange_id, "first-resolver", principal="user:1")
    with pytest.raises(ResolverBusy):
        resolve_pending(env, second, resolution="approve", reason="", claim_token="second-resolver")
    assert ToolCall.objects.get(pk=second.pk).status == ToolCallStatus.AWAITING_HUMAN


def test_a_stop_reaches_an_approved_call_and_the_receipt_covers_every_event(make_env, session, store):
    held = Held()
    hold = FunctionTool("hold", "Hold.", {"type": "object"}, held)
    env = make_env(LoopbackProvider([tool_turn(("hold", {"n": "a"}), ("echo", {"text": "b"}))]),
                   tools=ToolRegistry([hold, ECHO]), gate=ScriptedGate(require={"hold", "echo"}),
                   cancel_poll_interval=0.05)
    parked = run_turns_keyed(env, request_key="k", content="x")
    call = ToolCall.objects.select_related("frame").get(exchange_id=parked.exchange_id, tool="hold")
    worker, box = approve_in_thread(env, call)
    assert held.entered.wait(10)
    assert store.exchanges.request_cancel(parked.exchange_id, principal="user:1")
    worker.join(15)

    assert isinstance(box["result"].outcome, Canceled)
    assert held.log == ["enter a", "exit a"]
    statuses = dict(ToolCall.objects.filter(exchange_id=parked.exchange_id).values_list("tool", "status"))
    assert statuses == {"hold": ToolCallStatus.CANCELED, "echo": ToolCallStatus.CANCELED}
    exchange = Exchange.objects.get(pk=parked.exchange_id)
    last = SessionEvent.objects.filter(exchange=exchange).order_by("-seq").first()
    assert exchange.receipt["last_seq"] == last.seq  # nothing of the exchange lands after its receipt
    assert verify_rows(load_session_rows(session.pk)) == []  # replay-verify: receipts, seqs, projection


def test_an_unclaimed_exchange_whose_task_was_lost_is_driven_by_recovery(make_env, store):
    env = make_env(LoopbackProvider([text_turn("hello")]))
    exchange = store.exchanges.admit(session_id=env.scope.session_id, request_key="lost", content="hi",
                                     principal=env.principal, config={}).exchange
    assert exchange.claim_token == ""
    result = recover_exchange(env, exchange.pk, claim_token="sweeper")
    assert result.outcome == Completed(answer="hello")


def test_the_payload_cap_of_the_bounds_reaches_the_store(make_env, session):
    from loop.bounds import Bounds

    env = make_env(LoopbackProvider([text_turn("never")]), bounds=Bounds(payload_cap=2048))
    with pytest.raises(PayloadTooLarge):
        run_turns_keyed(env, request_key="big", content="x" * 4096)
    assert not Exchange.objects.filter(session=session).exists()  # nothing half-written


def test_a_driver_whose_lease_was_taken_over_cannot_write(make_env, session, store, clock):
    entered, release = threading.Event(), threading.Event()

    def stall(arguments: Mapping[str, Any], context: ToolContext) -> str:
        entered.set()
        release.wait(10)  # the worker stalls (a GC pause, a frozen VM) past its lease
        return "written too late"

    tools = ToolRegistry([FunctionTool("stall", "Stall.", {"type": "object"}, stall)])
    stalled_env = make_env(LoopbackProvider([tool_turn(("stall", {})), text_turn("stalled answer")]), tools=tools)
    exchange = store.exchanges.admit(session_id=session.pk, request_key="fenced", content="go", principal="user:1",
                                     config={}, claim_token="stalled").exchange
    box: dict[str, Any] = {}

    def stalled_driver() -> None:
        from loop.driver import drive_exchange

        try:
            box["result"] = drive_exchange(stalled_env, exchange, claim_token="stalled")
        except Exception as exc:
            box["error"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=stalled_driver)
    worker.start()
    assert entered.wait(10)
    clock.advance(LEASE + 1)
    # The lease lapsed: taken over.
    assert store.exchanges.claim_for_recovery(exchange.pk, "rescuer", principal="user:1")
    release.set()
    worker.join(15)

    assert isinstance(box.get("error"), LeaseLost)
    call = ToolCall.objects.get(exchange=exchange)
    assert call.status == ToolCallStatus.RUNNING  # the stalled driver's result was refused
    assert not SessionEvent.objects.filter(exchange=exchange, kind="tool_result").exists()
    held = Exchange.objects.get(pk=exchange.pk)
    assert (held.status, held.claim_token) == (ExchangeStatus.OPEN, "rescuer")  # not broken, still the rescuer's

    rescuer_env = make_env(LoopbackProvider([text_turn("rescued")]), tools=tools)
    result = recover_exchange(rescuer_env, exchange.pk, claim_token="rescuer")
    assert result.outcome == Completed(answer="rescued")
    assert verify_rows(load_session_rows(session.pk)) == []
