"""One compaction cycle at the idle boundary, just before a provider call (SPEC L14, L13).

The driver calls :func:`run_cycle` at the top of every turn. It is cheap when nothing is pending (a
comparison on the window's running totals). When a cycle is pending it, in order: respects the
episode's latch (no further automatic compaction after a degraded one), stops at the quota (the
driver then ends the frame loudly: the root settles the exchange, a child closes its frame), asks
``loop.before_compaction`` (a deny skips compaction for the rest of the exchange; pressure is looked
at again at the next one), has the loop's own provider write the summary through the one dispatch
seam, probes it, and commits the compaction row, the probe row and their audit rows as one durable
step between two named failpoints.

An episode is one conversation (a session, so every message of it and every exchange of a GDL run,
which is one session) in one narrative: the quota and the latch carry over from one exchange to the
next, and a new session starts fresh. They are counted from the episode's probe rows, which commit
with the compactions they count, so the database is the truth for a resumed drive or another
worker. A sub-agent's frame (:mod:`loop.delegation`) runs the same cycle over its own
``child:<name>:c<call>:`` narrative with its own :class:`EpisodeState`, so it compacts and counts
its own quota, never the parent's. A hook's deny is the drive's alone (the rest of the exchange).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from loop import tracing
from loop.bounds import truncate_output
from loop.budgets import DispatchAuthority
from loop.cancellation import CancelToken
from loop.compaction.manifest import build_manifest
from loop.compaction.policy import CompactionPolicy, Plan, plan_compaction, under_pressure
from loop.compaction.probes import ProbeReport, draw_probes, score
from loop.compaction.prompt import render_transcript, summary_request
from loop.compaction.tokens import count_tokens
from loop.context import ContextBuilder, WindowView
from loop.dispatch import dispatch
from loop.errors import ProviderError
from loop.failpoints import failpoint
from loop.hooks import HookContext, HookPoint, LoopHooks
from loop.models import Exchange
from loop.providers.base import AssistantMessage, LlmProvider, Message
from loop.store import Store
from loop.tripwires import Detector

if TYPE_CHECKING:
    from loop.env import LoopEnv

SUMMARY_CAP_BYTES = 32 * 1024
QUOTA_REASON = "compaction_quota_exhausted"
CycleStatus = Literal["idle", "compacted", "latched", "denied", "quota_exhausted"]


@dataclass(frozen=True, slots=True)
class CycleEnv:
    """What a cycle needs, injected by the driver."""

    store: Store
    provider: LlmProvider
    context: ContextBuilder
    hooks: LoopHooks
    policy: CompactionPolicy
    narrative: str
    principal: str
    agent: str
    replay_cap: int
    request_cap: int
    detector: Detector  # the credential guard the window is folded under (SPEC L16)


@dataclass
class EpisodeState:
    """One drive's copy of the episode: ``compactions`` and ``latched`` are loaded from the session's
    probe rows the first time a cycle is pending (earlier exchanges of the session count); ``denied``
    and ``exhausted`` are this drive's own."""

    loaded: bool = False
    compactions: int = 0
    latched: bool = False
    denied: bool = False
    exhausted: bool = False


@dataclass(frozen=True, slots=True)
class Cycle:
    """What the cycle did. ``view`` is the window as it stands when nothing was committed."""

    status: CycleStatus
    view: WindowView | None = None
    seq: int | None = None
    report: ProbeReport | None = None


def cycle_env(env: LoopEnv) -> CycleEnv:
    """What a driver's :class:`~loop.env.LoopEnv` gives its compaction cycles."""
    return CycleEnv(store=env.store, provider=env.provider, context=env.context, hooks=env.hooks,
                    policy=env.compaction, narrative=env.narrative, principal=env.principal, agent=env.agent.name,
                    replay_cap=env.bounds.replay_cap, request_cap=env.bounds.request_cap, detector=env.detector)


def quota_row(state: EpisodeState, env: LoopEnv) -> dict[str, object]:
    """The named session-log row of the loud stop past the quota."""
    return {"name": QUOTA_REASON, "compactions": state.compactions, "max_per_episode": env.compaction.max_per_episode}


def message_text(message: Message) -> str:
    """The text of a message a probe may find (content and tool-call arguments)."""
    if isinstance(message, AssistantMessage) and message.tool_calls:
        return "\n".join([message.content, *(f"{c.name} {c.arguments}" for c in message.tool_calls)])
    return message.content


def run_cycle(env: CycleEnv, exchange: Exchange, state: EpisodeState, *, authority: DispatchAuthority,
              cancel: CancelToken) -> Cycle:
    """Compact the window if a cycle is pending and allowed.

    Raises:
        BudgetRefused, DispatchCanceled, ProviderError: from the summary call, as for any turn.
    """
    view = env.context.view(env.store, exchange.session_id, narrative=env.narrative, cap=env.replay_cap,
                            guard=env.detector)
    if not under_pressure(tokens=view.tokens, rows=view.rows, policy=env.policy):
        return Cycle("idle", view)
    plan = plan_compaction(view.items, env.policy)
    if plan is None:
        return Cycle("idle", view)
    if not state.loaded:
        episode = env.store.compactions.episode(exchange.session_id, narrative=env.narrative)
        state.loaded, state.compactions, state.latched = True, episode.compactions, episode.latched
    if state.latched:
        return Cycle("latched", view)
    if state.denied:
        return Cycle("denied", view)
    if state.compactions >= env.policy.max_per_episode:
        state.exhausted = True
        return Cycle("quota_exhausted", view)
    verdict = env.hooks.run(HookPoint.BEFORE_COMPACTION, HookContext(
        point=HookPoint.BEFORE_COMPACTION, session_id=str(exchange.session_id), exchange_id=str(exchange.pk),
        agent=env.agent, detail={"window_tokens": view.tokens, "covered_rows": len(plan.covered),
                                 "covered_tokens": plan.covered_tokens, "reason": plan.reason,
                                 "narrative": env.narrative},
    ))
    if not verdict.allowed:
        state.denied = True
        return Cycle("denied", view)

    if not tracing.enabled:
        return _compact(env, exchange, state, plan, authority=authority, cancel=cancel)
    span = tracing.tracer.start("skald.compaction", {
        "gen_ai.agent.name": env.agent, "skald.exchange.id": exchange.pk, "skald.narrative": env.narrative,
        "skald.compaction.reason": plan.reason, "skald.compaction.covered_rows": len(plan.covered),
        "skald.compaction.window_tokens": view.tokens})
    with tracing.active(span):
        cycle = _compact(env, exchange, state, plan, authority=authority, cancel=cancel)
        if cycle.report is not None:
            report = cycle.report  # the probe score: the share of probe facts the summary kept
            span.set({"skald.compaction.probe_score": 1 - report.lost_permille / 1000,
                      "skald.compaction.probe_result": report.result, "skald.compaction.probes": len(report.probes)})
    return cycle


def _compact(env: CycleEnv, exchange: Exchange, state: EpisodeState, plan: Plan, *,
             authority: DispatchAuthority, cancel: CancelToken) -> Cycle:
    messages = [item.message for item in plan.covered if item.message is not None]
    transcript = render_transcript(messages, clear_over=env.policy.clear_tool_results_over)
    request = summary_request(transcript, max_output_tokens=env.policy.summary_max_tokens,
                              metadata={"session": exchange.session_id, "exchange": exchange.number,
                                        "narrative": env.narrative})
    assembled = dispatch(env.provider, request, authority=authority, cancel=cancel, request_cap=env.request_cap)
    summary, _cut = truncate_output(assembled.text.strip(), SUMMARY_CAP_BYTES)
    if not summary:
        raise ProviderError("the provider wrote an empty compaction summary", code="compaction_summary_empty")
    texts = [message_text(message) for message in messages]
    report = score(draw_probes(texts), before="\n".join(texts), summary=summary,
                   latch_permille=env.policy.latch_permille)
    manifest = build_manifest(plan, summary_tokens=count_tokens(summary), cleared=transcript.cleared,
                              episode_index=state.compactions + 1)
    failpoint("loop.compaction.before_row")
    commit = env.store.compactions.commit(
        exchange=exchange, narrative=env.narrative, summary=summary, manifest=manifest,
        report={**report.as_payload(), "guard": env.detector.fingerprint},  # the rule set the rows were screened by
        usage=(assembled.input_tokens or 0, assembled.output_tokens or 0),
        spent_tokens=authority.spent_tokens, accounting_incomplete=authority.accounting_incomplete,
        principal=env.principal,
    )
    failpoint("loop.compaction.after_row")
    state.compactions += 1
    state.latched = report.degraded
    return Cycle("compacted", None, commit.seq, report)
