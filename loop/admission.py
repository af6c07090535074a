"""Admission (SPEC L4): a request becomes an exchange idempotently, after tripwires and the start
policy. Admission and driving are separate so the web process admits and a worker drives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loop import tracing
from loop.env import LoopEnv
from loop.errors import HarnessError, HookError
from loop.failpoints import failpoint
from loop.hooks import HookContext, HookPoint
from loop.masking import find_tripwires
from loop.models import Exchange


class InputRefused(HarnessError):
    """The input carries a credential; ``kinds`` names them (never the value). Nothing was stored."""

    code = "credential_tripwire"

    def __init__(self, kinds: list[str]) -> None:
        super().__init__(f"the message matches credential tripwires ({', '.join(kinds)}); it was not stored")
        self.kinds: tuple[str, ...] = tuple(kinds)


def run_hook(env: LoopEnv, point: HookPoint, exchange_id: int | None, detail: Mapping[str, Any]) -> None:
    verdict = env.hooks.run(
        point,
        HookContext(point=point, session_id=str(env.scope.session_id),
                    exchange_id=str(exchange_id) if exchange_id else None, agent=env.agent.name, detail=detail),
    )
    if not verdict.allowed:
        raise HookError(f"{point.value} denied: {verdict.reason}", code="hook_denied")


def admit_exchange(
    env: LoopEnv, *, request_key: str, content: str, author: str = "", claim_token: str = "",
    trace_links: Sequence[str] = (),
) -> tuple[Exchange, bool]:
    """Idempotent admission (SPEC L4): ``loop.before_start`` policy, tripwires, then the stored row.

    Returns ``(exchange, replayed)``; a replayed exchange wrote nothing.

    Raises:
        InputRefused: the content matches credential tripwires (nothing stored).
        HookError: the start policy denied it.
        AdmissionRefused: another exchange of the session is still active.
    """
    if not tracing.enabled:
        return _admit(env, request_key=request_key, content=content, author=author, claim_token=claim_token)
    span = tracing.tracer.start("skald.admission", {
        "skald.session.id": env.scope.session_id, "gen_ai.agent.name": env.agent.name,
        "gen_ai.conversation.id": str(env.scope.session_id), "skald.source": env.scope.source},
        links=trace_links)
    with tracing.active(span):
        exchange, replayed = _admit(env, request_key=request_key, content=content, author=author,
                                    claim_token=claim_token, traceparent=span.traceparent())
        span.set({"skald.exchange.id": exchange.pk, "skald.exchange.number": exchange.number,
                  "skald.admission.replayed": replayed})
    return exchange, replayed


def _admit(env: LoopEnv, *, request_key: str, content: str, author: str, claim_token: str, traceparent: str = ""
           ) -> tuple[Exchange, bool]:
    if env.hooks.configured(HookPoint.BEFORE_START):
        # An exact retry is answered before the policy runs: it admits nothing. Without a policy
        # the store's own admission answers it, in the same query that checks the session.
        existing = env.store.exchanges.find(env.scope.session_id, request_key)
        if existing is not None:
            return existing, True
    kinds = find_tripwires(content, env.detector)
    if kinds:
        raise InputRefused(kinds)
    run_hook(env, HookPoint.BEFORE_START, None, {"request_key": request_key})
    admission = env.store.exchanges.admit(
        session_id=env.scope.session_id, request_key=request_key, content=content, principal=env.principal,
        config={"bounds": env.bounds.as_dict(), "agent": env.agent.name, "provider": env.provider.name,
                "principal": env.principal,  # whose turn: later drivers rebuild the scope from it
                "budget_tokens": env.bounds.budget_tokens},
        author=author, claim_token=claim_token, traceparent=traceparent,
    )
    if not admission.replayed:
        failpoint("loop.after_admission")
    return admission.exchange, admission.replayed
