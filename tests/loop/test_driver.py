"""The driver end to end on the real store, with scripted providers (SPEC L1-L5, L9, L10, L12, L15)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from loop.bounds import Bounds
from loop.driver import run_turns_keyed
from loop.errors import PersistError, ProviderError
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, SessionEvent, ToolCall, ToolCallStatus
from loop.outcomes import (
    BudgetExceeded,
    Canceled,
    Completed,
    ProviderFailed,
    TurnCapReached,
)
from loop.providers.base import MessageEnd, ToolResultMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.tools.registry import ToolRegistry
from tests.loop.conftest import ECHO
from tests.loop.fakes import Held, Rendezvous, ScriptedGate, StreamUntilStopped

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def in_thread(fn):
    """Run ``fn`` in a worker thread that closes its own database connection."""
    box: dict = {}

    def target():
        try:
            box["r"] = fn()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


def kinds(session) -> list[str]:
    return list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("kind", flat=True))


def test_it_completes_a_tool_free_turn_with_a_receipt(make_env, session):
    provider = LoopbackProvider([text_turn("hello")])
    result = run_turns_keyed(make_env(provider), request_key="k1", content="hi")
    assert result.outcome == Completed(answer="hello")
    assert result.receipt["outcome"] == "completed" and result.receipt["events"] == 3
    assert kinds(session) == ["user", "assistant", "control:exchange_settled"]
    provider.assert_complete()


def test_it_runs_a_tool_round_and_records_the_fixed_pipeline(make_env, session):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "ping"})), text_turn("done")])
    result = run_turns_keyed(make_env(provider), request_key="k1", content="hi")
    assert isinstance(result.outcome, Completed)
    assert kinds(session) == ["user", "assistant", "control:tool_intent", "tool_result", "control:tool_done",
                              "assistant", "control:exchange_settled"]
    call = ToolCall.objects.get(session=session)
    assert (call.call_key, call.status, call.result) == ("e1:t1:c0", ToolCallStatus.COMPLETED, "echo: ping")
    second = provider.calls[1].messages
    assert second[1].tool_calls[0].id == "e1:t1:c0"  # re-keyed for the model
    assert second[2] == ToolResultMessage(call_id="e1:t1:c0", name="echo", content="echo: ping")


def test_an_exact_retry_returns_the_stored_receipt_and_sends_nothing(make_env):
    provider = LoopbackProvider([text_turn("once")])
    first = run_turns_keyed(make_env(provider), request_key="same", content="hi")
    again = run_turns_keyed(make_env(provider), request_key="same", content="hi")
    assert again.replayed and again.receipt == first.receipt and again.exchange_id == first.exchange_id
    assert len(provider.calls) == 1


def test_a_model_that_always_asks_for_a_tool_gets_exactly_max_turns_requests(make_env, session):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "again"}))], repeat_last=True)
    result = run_turns_keyed(make_env(provider), request_key="k", content="loop forever")
    assert result.outcome == TurnCapReached(turns=8)
    assert len(provider.calls) == 8
    last = ToolCall.objects.filter(session=session).order_by("-id").first()
    assert last.status == ToolCallStatus.CANCELED and "turn cap" in last.result  # the group stays complete
    assert ToolCall.objects.filter(session=session, status=ToolCallStatus.COMPLETED).count() == 7


def test_a_large_tool_output_reaches_the_next_request_truncated(make_env):
    provider = LoopbackProvider([tool_turn(("big_output", {"bytes": 100 * 1024})), text_turn("ok")])
    run_turns_keyed(make_env(provider), request_key="k", content="big")
    result = provider.calls[1].messages[-1]
    assert isinstance(result, ToolResultMessage)
    assert len(result.content.encode()) <= 16 * 1024
    assert "output truncated" in result.content


def test_an_unknown_tool_is_a_loud_refusal_the_model_sees(make_env):
    provider = LoopbackProvider([tool_turn(("rm_rf", {})), text_turn("sorry")])
    result = run_turns_keyed(make_env(provider), request_key="k", content="x")
    assert isinstance(result.outcome, Completed)
    seen = provider.calls[1].messages[-1]
    assert seen.is_error and "unknown_tool" in seen.content


def test_a_gate_denial_becomes_a_rejected_result(make_env, session):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "x"})), text_turn("ok")])
    run_turns_keyed(make_env(provider, gate=ScriptedGate(deny={"echo"})), request_key="k", content="x")
    call = ToolCall.objects.get(session=session)
    assert call.status == ToolCallStatus.REJECTED and "denied by the approval gate" in call.result


def test_invalid_arguments_are_a_model_visible_error(make_env):
    provider = LoopbackProvider([tool_turn(("echo", {"text": 42})), text_turn("ok")])
    run_turns_keyed(make_env(provider), request_key="k", content="x")
    seen = provider.calls[1].messages[-1]
    assert seen.is_error and "invalid_arguments" in seen.content


def test_a_required_call_parks_the_exchange_awaiting_human(make_env, session):
    gate = ScriptedGate(require={"echo"})
    provider = LoopbackProvider([tool_turn(("echo", {"text": "x"}), ("nap_unsafe", {"seconds": 0}))])
    result = run_turns_keyed(make_env(provider, gate=gate), request_key="k", content="x")
    assert result.outcome.name == "awaiting_human"
    assert Exchange.objects.get(pk=result.exchange_id).status == ExchangeStatus.PARKED
    statuses = dict(ToolCall.objects.filter(session=session).values_list("tool", "status"))
    assert statuses == {"echo": ToolCallStatus.AWAITING_HUMAN, "nap_unsafe": ToolCallStatus.COMPLETED}
    assert [c.tool for c in gate.parked] == ["echo"]
    assert EventKind.APPROVAL_REQUESTED in kinds(session)


def test_concurrency_safe_calls_fan_out_and_record_in_call_order(make_env, session):
    meet = Rendezvous(parties=4)  # four calls that can only finish together
    provider = LoopbackProvider([tool_turn(*[("meet", {"n": i}) for i in range(4)]), text_turn("met")])
    run_turns_keyed(make_env(provider, tools=ToolRegistry([meet.tool()])), request_key="k", content="meet")
    results = list(SessionEvent.objects.filter(session=session, kind="tool_result").order_by("seq"))
    assert [r.payload["key"] for r in results] == [f"e1:t1:c{i}" for i in range(4)]
    assert [r.payload["content"] for r in results] == [f"met {i}" for i in range(4)]
    assert meet.peak == 4 and len(meet.threads) == 4


def test_a_mixed_round_runs_sequentially(make_env):
    held = Held()
    mixed = ToolRegistry([held_tool(held, "hold", safe=True), held_tool(held, "hold_unsafe", safe=False)])
    provider = LoopbackProvider([tool_turn(("hold", {"n": "a", "hold": 0}), ("hold_unsafe", {"n": "b", "hold": 0})),
                                 text_turn("ok")])
    run_turns_keyed(make_env(provider, tools=mixed), request_key="k", content="hold")
    assert held.log == ["enter a", "exit a", "enter b", "exit b"]  # never overlapping


def held_tool(held: Held, name: str, *, safe: bool):
    from loop.tools.registry import FunctionTool

    return FunctionTool(name, "Hold.", {"type": "object"}, held, concurrency_safe=safe)


def test_a_stop_from_another_process_cancels_the_in_flight_provider_call(make_env, session, store):
    provider = StreamUntilStopped()
    env = make_env(provider, cancel_poll_interval=0.05)
    worker, box = in_thread(lambda: run_turns_keyed(env, request_key="k", content="x"))
    assert provider.streaming.wait(10)
    assert store.exchanges.request_cancel(Exchange.objects.get(session=session).pk, principal="user:1")
    worker.join(15)
    assert isinstance(box["r"].outcome, Canceled)
    assert kinds(session)[-2:] == [EventKind.CANCELED, EventKind.EXCHANGE_SETTLED]
    assert not ToolCall.objects.filter(session=session).exists()


def test_a_stop_during_a_tool_round_dispatches_no_further_tool(make_env, session, store):
    held = Held()
    tools = ToolRegistry([held_tool(held, "hold_unsafe", safe=False), ECHO])
    provider = LoopbackProvider([tool_turn(("hold_unsafe", {"n": "a"}), ("echo", {"text": "after"}))])
    env = make_env(provider, tools=tools, cancel_poll_interval=0.05)
    worker, box = in_thread(lambda: run_turns_keyed(env, request_key="k", content="x"))
    assert held.entered.wait(10)
    store.exchanges.request_cancel(Exchange.objects.get(session=session).pk, principal="user:1")
    worker.join(15)
    assert isinstance(box["r"].outcome, Canceled)
    assert held.log == ["enter a", "exit a"]
    echo = ToolCall.objects.get(session=session, tool="echo")
    assert echo.status == ToolCallStatus.CANCELED
    assert not SessionEvent.objects.filter(session=session, kind="control:tool_intent",
                                           payload__key=echo.call_key).exists()


def test_a_provider_failure_after_admission_is_durably_terminal(make_env):
    provider = LoopbackProvider([ProviderError("upstream 500", code="provider_http_status")])
    result = run_turns_keyed(make_env(provider), request_key="k", content="x")
    assert result.outcome == ProviderFailed(code="provider_http_status", message="upstream 500")
    again = run_turns_keyed(make_env(provider), request_key="k", content="x")
    assert again.replayed and len(provider.calls) == 1


def test_the_budget_stops_dispatch_with_at_most_one_overshoot(make_env):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "x"}), usage=(60, 60))], repeat_last=True)
    result = run_turns_keyed(make_env(provider, bounds=Bounds(budget_tokens=100)), request_key="k", content="x")
    assert result.outcome == BudgetExceeded(reason="budget_spent")
    assert len(provider.calls) == 1


def test_a_call_without_usage_makes_accounting_incomplete_and_refuses_further_dispatch(make_env):
    provider = LoopbackProvider([[*tool_turn(("echo", {"text": "x"}))[:-2], MessageEnd("tool_calls")],
                                 text_turn("never")])
    result = run_turns_keyed(make_env(provider), request_key="k", content="x")
    assert result.outcome == BudgetExceeded(reason="accounting_incomplete")
    assert len(provider.calls) == 1
    assert Exchange.objects.get(pk=result.exchange_id).accounting_incomplete


class RefusesAtOnce:
    """A provider that answers 503 before streaming anything."""

    name = "refuses"

    def stream(self, request, *, cancel):
        def failing():
            raise ProviderError("503 Service Unavailable", code="provider_http_503")
            yield

        return failing()


def test_a_call_refused_before_its_first_delta_spent_nothing_and_keeps_accounting_complete(make_env):
    result = run_turns_keyed(make_env(RefusesAtOnce()), request_key="k", content="x")
    assert result.outcome == ProviderFailed(code="provider_http_503", message="503 Service Unavailable")
    assert not Exchange.objects.get(pk=result.exchange_id).accounting_incomplete


def test_a_payload_over_the_cap_refuses_and_keeps_the_claim(make_env):
    provider = LoopbackProvider([text_turn("y" * 70_000)])
    with pytest.raises(PersistError):
        run_turns_keyed(make_env(provider), request_key="k", content="x")
    exchange = Exchange.objects.get(request_key="k")
    assert exchange.status == ExchangeStatus.BROKEN and exchange.error_code == "payload_too_large"


def test_a_slow_tool_times_out_as_a_model_visible_error(make_env):
    provider = LoopbackProvider([tool_turn(("nap_unsafe", {"seconds": 30})), text_turn("ok")])
    run_turns_keyed(make_env(provider, bounds=Bounds(tool_timeout=0.2)), request_key="k", content="x")
    seen = provider.calls[1].messages[-1]
    assert seen.is_error and "timed out after 0.2 s" in seen.content


def test_every_transition_has_its_audit_row(make_env, audit):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "x"})), text_turn("ok")])
    result = run_turns_keyed(make_env(provider), request_key="k", content="x")
    assert audit.labels() == [
        "loop.session.created", "loop.exchange.admitted", "loop.turn.ended", "loop.tool_call.transition",
        "loop.tool_call.transition", "loop.turn.ended", "loop.exchange.settled",
    ]
    moves = [(row.payload["from"], row.payload["to"]) for row in audit.rows if row.subject_type == "tool_call"]
    assert moves == [("planned", "running"), ("running", "completed")]
    assert audit.rows[-1].payload["receipt_digest"] == result.receipt["digest"]


def test_with_a_deny_all_gate_no_tool_ever_runs(make_env, session):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "x"}), ("nap", {"seconds": 0})), text_turn("ok")])
    run_turns_keyed(make_env(provider, gate=ScriptedGate(deny_all=True)), request_key="k", content="x")
    assert set(ToolCall.objects.filter(session=session).values_list("status", flat=True)) == {ToolCallStatus.REJECTED}
    assert all(m.is_error for m in provider.calls[1].messages[-2:])


def test_max_parallel_calls_bounds_a_fan_out(make_env):
    meet = Rendezvous(parties=2)  # pairs meet: two waves of two
    provider = LoopbackProvider([tool_turn(*[("meet", {"n": i}) for i in range(4)]), text_turn("met")])
    env = make_env(provider, tools=ToolRegistry([meet.tool()]), bounds=Bounds(max_parallel_calls=2))
    run_turns_keyed(env, request_key="k", content="meet")
    assert meet.peak == 2
    assert [m.content for m in provider.calls[1].messages[-4:]] == [f"met {i}" for i in range(4)]


def test_run_turns_always_mints_a_new_exchange(make_env):
    from loop.driver import run_turns

    provider = LoopbackProvider([text_turn("a"), text_turn("b")])
    first = run_turns(make_env(provider), content="same words")
    second = run_turns(make_env(provider), content="same words")
    assert first.exchange_id != second.exchange_id and len(provider.calls) == 2


def test_a_driver_renews_its_lease_while_a_long_tool_runs(make_env, session, audit, bus, clock):
    from loop.store import Store
    from tests.loop.conftest import TEST_TOOLS

    held = Held()
    short = Store(audit=audit, clock=clock, bus=bus, lease_seconds=0.15)  # renewed every 50 ms
    tools = ToolRegistry([held_tool(held, "hold", safe=False), *[TEST_TOOLS.get(n) for n in ("echo",)]])
    env = make_env(LoopbackProvider([tool_turn(("hold", {"n": "a"})), text_turn("ok")]), tools=tools,
                   cancel_poll_interval=0.01)
    env.store = short
    worker, box = in_thread(lambda: run_turns_keyed(env, request_key="k", content="x", claim_token="me"))
    assert held.entered.wait(10)
    first = Exchange.objects.get(session=session).lease_until
    renewed = threading.Event()

    def watch() -> None:
        try:
            for _ in range(500):
                if Exchange.objects.get(session=session).lease_until != first:
                    renewed.set()
                    return
                threading.Event().wait(0.01)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    watcher.join(15)
    short.exchanges.request_cancel(Exchange.objects.get(session=session).pk, principal="user:1")
    worker.join(15)
    assert renewed.is_set()  # the claim stayed alive while the tool ran
    assert isinstance(box["r"].outcome, Canceled)
