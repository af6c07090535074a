"""Compaction in the driver: at the idle boundary, once per crossing, probed, latched, capped, hooked."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from loop.bounds import Bounds
from loop.compaction.policy import CompactionPolicy
from loop.compaction.prompt import is_summary_request
from loop.compaction.tokens import message_tokens
from loop.context import ContextBuilder
from loop.driver import run_turns_keyed
from loop.env import LoopEnv
from loop.hooks import Allow, Deny, HookPoint, LoopHooks
from loop.models import Exchange, Session, SessionEvent
from loop.outcomes import BudgetExceeded, Completed
from loop.providers.base import SummaryMessage
from tests.loop.compaction.conftest import SMALL, scripted_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def new_session(store, like: Session) -> Session:
    return store.create_session(owner_id=like.owner_id, agent=like.agent, source="web", title="another",
                                principal=f"user:{like.owner_id}")


def on_session(env: LoopEnv, session: Session) -> LoopEnv:
    """The same environment, driving another session."""
    return replace(env, scope=replace(env.scope, session_id=session.pk))


def compactions(session_id: int) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session_id=session_id, kind="compaction").order_by("seq"))


def probes(session_id: int) -> list[dict]:
    return [e.payload for e in SessionEvent.objects.filter(session_id=session_id,
                                                           kind="control:compaction_probe").order_by("seq")]


def test_each_crossing_makes_exactly_one_compaction_and_the_window_is_summary_plus_tail(make_env, session, store):
    provider = scripted_model()
    env = make_env(provider, compaction=SMALL, context=ContextBuilder())
    for number in range(1, 13):
        assert isinstance(run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}").outcome,
                          Completed)
    rows = compactions(session.pk)
    assert len(rows) >= 3
    assert len(probes(session.pk)) == len(rows)
    kinds = ["summary" if is_summary_request(r) else "turn" for r in provider.calls]
    assert "summary,summary" not in ",".join(kinds)  # never two cycles for one crossing
    for previous, row in zip([None, *rows], rows, strict=False):
        manifest = row.payload["manifest"]
        assert manifest["reason"] == "tokens" and manifest["covered_tokens"] >= SMALL.threshold_tokens
        assert manifest["previous_seq"] == (previous.seq if previous else None)
        covered = SessionEvent.objects.filter(session_id=session.pk, seq__gte=manifest["first_seq"],
                                              seq__lte=manifest["last_seq"],
                                              kind__in=["user", "assistant", "tool_result", "compaction"])
        assert covered.count() == manifest["count"]
    # Every request after a compaction opens with its summary, then the verbatim tail.
    for index, request in enumerate(provider.calls[:-1]):
        if is_summary_request(request):
            following = provider.calls[index + 1]
            assert isinstance(following.messages[0], SummaryMessage)
            assert following.messages[0].kind == "compaction"
    # Bounded: no request carries more than threshold + keep tokens plus one summary and one exchange.
    bound = SMALL.threshold_tokens + SMALL.keep_tokens + SMALL.summary_max_tokens + 400
    for request in provider.calls:
        if not is_summary_request(request):
            assert sum(message_tokens(m) for m in request.messages) <= bound


def test_the_incremental_window_equals_a_fresh_one_after_compactions(make_env, session, store):
    env = make_env(scripted_model(), compaction=SMALL, context=ContextBuilder())
    for number in range(1, 10):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
        live = env.context.view(env.store, session.pk, narrative="", cap=500)
        fresh = ContextBuilder().view(store, session.pk, narrative="", cap=500)
        assert live.messages == fresh.messages and live.tokens == fresh.tokens
    assert compactions(session.pk)


def test_rows_are_never_mutated_or_deleted(make_env, session, store):
    env = make_env(scripted_model(), compaction=SMALL)
    run_turns_keyed(env, request_key="k1", content="check 1")
    before = {e.seq: json.dumps(e.payload, sort_keys=True) for e in SessionEvent.objects.filter(session=session)}
    for number in range(2, 9):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
    after = {e.seq: json.dumps(e.payload, sort_keys=True) for e in SessionEvent.objects.filter(session=session)}
    assert compactions(session.pk) and all(after[seq] == body for seq, body in before.items())


def test_a_degraded_compaction_latches_the_episode(make_env, session, store):
    provider = scripted_model(lambda transcript: "Nothing of note happened.", rounds=12)
    env = make_env(provider, compaction=SMALL, bounds=Bounds(max_turns=20))
    assert isinstance(run_turns_keyed(env, request_key="long", content="check 1").outcome, Completed)
    reports = probes(session.pk)
    assert len(reports) == 1, "no further automatic compaction after the latch, though pressure rose again"
    assert (reports[0]["result"], reports[0]["degraded"], reports[0]["latched"]) == ("degraded", True, True)
    assert reports[0]["lost_permille"] >= 500 and reports[0]["pre_hits"] >= 5
    # The latch is the episode's, and the episode is the session: the next exchange, on a drive of
    # its own, does not compact though its pressure rises again.
    later = make_env(scripted_model(lambda transcript: "Nothing of note happened.", rounds=12),
                     compaction=SMALL, bounds=Bounds(max_turns=20))
    assert isinstance(run_turns_keyed(later, request_key="next", content="check 2").outcome, Completed)
    assert not any(is_summary_request(r) for r in later.provider.calls)
    assert len(probes(session.pk)) == 1
    # A new session is a new episode: it compacts (and latches) on its own.
    fresh = on_session(make_env(scripted_model(lambda transcript: "Nothing of note happened.", rounds=12),
                                compaction=SMALL, bounds=Bounds(max_turns=20)), new_session(store, session))
    assert isinstance(run_turns_keyed(fresh, request_key="long", content="check 1").outcome, Completed)
    assert len(probes(fresh.scope.session_id)) == 1 and probes(fresh.scope.session_id)[0]["latched"] is True
    assert len(probes(session.pk)) == 1


def test_the_quota_is_the_sessions_across_its_exchanges_and_a_new_session_starts_fresh(make_env, session, store):
    policy = replace(SMALL, max_per_episode=2)
    ended = []
    for number in range(1, 13):  # each exchange on a drive of its own, as on any worker
        env = make_env(scripted_model(), compaction=policy, context=ContextBuilder())
        ended.append(run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}").outcome)
        if not isinstance(ended[-1], Completed):
            break
    assert ended[-1] == BudgetExceeded("compaction_quota_exhausted"), "the third compaction of the session stops"
    assert all(isinstance(outcome, Completed) for outcome in ended[:-1]) and len(ended) >= 3
    rows = compactions(session.pk)
    assert len(rows) == 2 and len({row.exchange_id for row in rows}) == 2, "one compaction in each of two exchanges"
    assert [row.payload["manifest"]["episode_index"] for row in rows] == [1, 2]
    named = SessionEvent.objects.get(session=session, kind="control:compaction_quota")
    assert named.payload == {"name": "compaction_quota_exhausted", "compactions": 2, "max_per_episode": 2}
    assert store.compactions.episode(session.pk).compactions == 2
    # The next message of the session meets the same count: the quota does not reset per exchange.
    again = make_env(scripted_model(), compaction=policy, context=ContextBuilder())
    assert run_turns_keyed(again, request_key="after", content="check 99").outcome == BudgetExceeded(
        "compaction_quota_exhausted")
    assert len(compactions(session.pk)) == 2
    # A new session counts from zero.
    other = new_session(store, session)
    for number in range(1, 13):
        env = on_session(make_env(scripted_model(), compaction=policy, context=ContextBuilder()), other)
        assert isinstance(run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}").outcome,
                          Completed)
        if compactions(other.pk):
            break
    assert [row.payload["manifest"]["episode_index"] for row in compactions(other.pk)] == [1]
    assert store.compactions.episode(other.pk).compactions == 1 and len(compactions(session.pk)) == 2


def test_the_sixteen_cap_stops_loudly_with_a_named_row(make_env, session, store):
    policy = CompactionPolicy(threshold_tokens=300, keep_tokens=200, clear_tool_results_over=400,
                              summary_max_tokens=100, max_per_episode=2)
    assert CompactionPolicy().max_per_episode == 16
    env = make_env(scripted_model(rounds=30), compaction=policy, bounds=Bounds(max_turns=40))
    result = run_turns_keyed(env, request_key="long", content="check 1")
    assert result.outcome == BudgetExceeded("compaction_quota_exhausted")
    exchange = Exchange.objects.get(pk=result.exchange_id)
    assert (exchange.status, exchange.outcome) == ("settled", "budget_exceeded")
    assert len(compactions(session.pk)) == 2
    named = SessionEvent.objects.get(session=session, kind="control:compaction_quota")
    assert named.payload == {"name": "compaction_quota_exhausted", "compactions": 2, "max_per_episode": 2}
    assert exchange.receipt["detail"] == {"reason": "compaction_quota_exhausted"}


def test_the_hook_runs_only_when_a_cycle_is_pending_and_a_deny_skips_it_for_the_exchange(make_env, session, store):
    asked: list[dict] = []
    denies: list[str] = []

    def policy_hook(context):
        asked.append(dict(context.detail))
        return Deny("not during business hours") if len(asked) == 1 else Allow()

    hooks = LoopHooks({HookPoint.BEFORE_COMPACTION: [policy_hook]},
                      deny_sink=lambda point, context, reason: denies.append(f"{point}:{reason}"))
    env = make_env(scripted_model(rounds=12), compaction=SMALL, hooks=hooks, bounds=Bounds(max_turns=20))
    run_turns_keyed(env, request_key="k1", content="check 1")
    assert len(asked) == 1, "asked once when pending; the deny holds for the rest of the exchange"
    assert asked[0]["covered_tokens"] >= SMALL.threshold_tokens and asked[0]["reason"] == "tokens"
    assert denies == ["loop.before_compaction:not during business hours"]
    assert compactions(session.pk) == []
    run_turns_keyed(env, request_key="k2", content="check 2")  # pressure is looked at again
    assert len(asked) >= 2 and len(compactions(session.pk)) == len(asked) - 1  # each allowed ask compacted


def test_no_hook_is_asked_while_nothing_is_pending(make_env, session, store):
    asked: list[object] = []
    hooks = LoopHooks({HookPoint.BEFORE_COMPACTION: [lambda context: asked.append(context) or Allow()]})
    env = make_env(scripted_model(), compaction=CompactionPolicy(), hooks=hooks)
    for number in range(1, 4):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
    assert asked == [] and compactions(session.pk) == []


def test_a_retried_commit_writes_nothing_new(make_env, session, store):
    env = make_env(scripted_model(), compaction=SMALL)
    for number in range(1, 6):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
    row = compactions(session.pk)[0]
    probe = SessionEvent.objects.get(session=session, kind="control:compaction_probe",
                                     payload__compaction_seq=row.seq)
    exchange = Exchange.objects.get(pk=row.exchange_id)
    count = SessionEvent.objects.filter(session=session).count()
    again = store.compactions.commit(
        exchange=exchange, narrative="", summary=row.payload["summary"], manifest=row.payload["manifest"],
        report={k: v for k, v in probe.payload.items() if k != "compaction_seq"}, usage=(1, 1), spent_tokens=0,
        accounting_incomplete=False, principal="agent:helper")
    assert (again.seq, again.probe_seq, again.replayed) == (row.seq, probe.seq, True)
    assert SessionEvent.objects.filter(session=session).count() == count


@pytest.mark.parametrize("summary", ["Done.", "Nothing of note happened."], ids=["terse", "vague"])
def test_a_summary_that_drops_every_probe_reads_degraded_even_over_a_short_prefix(make_env, session, store, summary):
    # A covered prefix of a few rows: most of its ten slices hold no row of their own.
    policy = CompactionPolicy(threshold_tokens=150, keep_tokens=100, keep_rows=100, clear_tool_results_over=400,
                              summary_max_tokens=100)
    provider = scripted_model(lambda transcript: summary, rounds=3)
    env = make_env(provider, compaction=policy, bounds=Bounds(max_turns=20))
    run_turns_keyed(env, request_key="short", content="check 1")
    report = probes(session.pk)[0]
    manifest = compactions(session.pk)[0].payload["manifest"]
    assert manifest["count"] < 10, "a short covered prefix"
    covered = " ".join(json.dumps(e.payload) for e in SessionEvent.objects.filter(
        session=session, seq__gte=manifest["first_seq"], seq__lte=manifest["last_seq"]))
    drawn = [p["text"] for p in report["probes"]]
    assert drawn and all(text and text in covered for text in drawn), "drawn only from what the rows hold"
    assert report["pre_hits"] == len(drawn) and report["post_hits"] == 0
    assert (report["result"], report["degraded"], report["latched"]) == ("degraded", True, True)
