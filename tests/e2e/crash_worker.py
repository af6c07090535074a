"""A worker process for the crash tests: ``python -m tests.e2e.crash_worker ROLE DIR``.

It runs the real kernel on the real store and audit chain against the database its environment
names (``DATABASE_URL`` or ``SKALD_SQLITE_PATH``). With ``SKALD_FAILPOINTS`` it dies by SIGKILL at
that point; the next process (the restarted worker) recovers what it left and reports the
invariants as JSON on stdout. ``DIR`` holds the effect log the test tool appends to.

Roles:
    migrate  create the schema (a template for each run)
    history  three such turns (the history a compaction scenario's turn compacts first)
    turn     a user message whose model asks for one effect, then answers
    park     the same, but the effect needs an approval: the exchange parks
    approve  a human approves the parked call (the resolver)
    recover  wait for every lease to lapse, recover what no live worker holds, report
    report   only report (the real stack's sweep recovered: ``tests.e2e.crash_stack``)

With ``CRASH_DELEGATE=1`` the root agent delegates and the child makes the effect: a ``turn`` crashes
inside the frame tree, and a ``park`` parks the whole tree on the child's call.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROLES = ("migrate", "history", "turn", "park", "approve", "recover", "report")


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    import django

    django.setup()


DELEGATE = os.environ.get("CRASH_DELEGATE") == "1"


class PolicyProvider:
    """Deterministic: asks for its call until it sees that call's result, then answers; asked to
    compact, writes the extractive summary. The call is the effect, or (the root, when delegating)
    the delegate that runs a child making it."""

    name = "crash-policy"

    def stream(self, request: Any, *, cancel: Any) -> Iterator[Any]:
        from loop.compaction.extractive import extractive_summary
        from loop.compaction.prompt import is_summary_request
        from loop.providers.base import ToolResultMessage
        from loop.providers.loopback import text_turn, tool_turn

        if is_summary_request(request):
            yield from text_turn(extractive_summary(request.messages[0].content))
            return
        last = request.messages[-1] if request.messages else None
        root = not str(request.metadata.get("narrative", ""))
        call = ("delegate", {"task": "make the effect"}) if DELEGATE and root else ("effect", {})
        turn = text_turn("done") if isinstance(last, ToolResultMessage) else tool_turn(call)
        yield from turn


class Delegate:
    """Runs the ``worker`` child agent (the effect only) in a child frame."""

    name = "delegate"
    description = "Hand the task to the worker agent."
    parameters: Mapping[str, Any] = {"type": "object", "properties": {"task": {"type": "string"}},
                                     "required": ["task"]}
    concurrency_safe = True
    restart_hint = "mark_interrupted"
    timeout = None

    def run(self, arguments: Mapping[str, Any], context: Any) -> Any:
        from loop.delegation import ChildRequest, frame_link, run_child

        return run_child(frame_link(context), ChildRequest(agent=WORKER, task=str(arguments["task"]),
                                                           tools=["effect"], provider=PolicyProvider(),
                                                           selection={"rule": "crash", "client": "crash-policy"}),
                         context)


class FrameAgents:
    def child(self, agent: str, selection: Mapping[str, Any]) -> Any:
        from loop.ports import ChildSetup

        return ChildSetup(agent=WORKER, provider=PolicyProvider())


WORKER: Any = None


def _env(workdir: Path, *, require: bool) -> Any:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from loop.compaction.policy import CompactionPolicy
    from loop.driver import LoopEnv
    from loop.ports import AgentSpec, GateCall, GateVerdict, ToolContext, TurnScope
    from loop.tools.hints import RestartHint
    from loop.tools.registry import FunctionTool, ToolRegistry
    from skald.loop_adapters.bus import ChannelsBus
    from skald.loop_adapters.store import kernel_store

    def effect(arguments: Mapping[str, Any], context: ToolContext) -> str:
        with (workdir / "events.log").open("a") as log:  # the effect the invariants count
            log.write(f"effect {context.call_key}\n")
        return "effect done"

    class Gate:
        def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
            needs = require and call.tool == "effect"
            return GateVerdict("require", "effects need approval") if needs else GateVerdict("allow")

        def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
            return {"reason": verdict.reason}

    user, _ = get_user_model().objects.get_or_create(username="alice")
    store = kernel_store()
    from loop.models import Session

    session = Session.objects.filter(owner=user).first() or store.create_session(
        owner_id=user.pk, agent="crash", source="web", title="crash", principal=f"user:{user.pk}")
    effect_tool = FunctionTool("effect", "Append to the effect log.", {"type": "object"}, effect,
                               restart_hint=RestartHint.MARK_INTERRUPTED)
    tools = ToolRegistry([effect_tool, Delegate()] if DELEGATE else [effect_tool])
    global WORKER
    WORKER = AgentSpec(name="worker", kind="task", system_prompt="worker", tools=("effect",), client="")
    agent = AgentSpec(name="crash", kind="chat", system_prompt="crash test", tools=tools.names(), client="")
    scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{user.pk}", user_id=user.pk,
                      agent="crash", workspace=workdir)
    return LoopEnv(store=store, provider=PolicyProvider(), tools=tools, gate=Gate(), agent=agent, scope=scope,
                   bus=ChannelsBus(), cancel_poll_interval=0.05, frame_agents=FrameAgents(),
                   compaction=CompactionPolicy().override(settings.SKALD_COMPACTION))


def _recover(workdir: Path, *, require: bool, timeout: float) -> dict[str, Any]:
    from django.conf import settings

    from loop.models import Exchange, ExchangeStatus
    from loop.recovery import recover_exchange
    from skald.core.ids import new_token

    env = _env(workdir, require=require)
    store = env.store
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        stranded = store.exchanges.needing_recovery(unclaimed_for=settings.SKALD_LEASE_SECONDS)
        for exchange_id in stranded:
            recover_exchange(env, exchange_id, claim_token=new_token())
        if not Exchange.objects.filter(status=ExchangeStatus.OPEN).exists() and not stranded:
            break
        time.sleep(0.2)
    return _report(workdir, require=require, seconds=round(time.monotonic() - started, 2))


def _report(workdir: Path, *, require: bool, seconds: float) -> dict[str, Any]:
    """The invariants over the whole database, as a JSON-able report."""
    from audit.services import chain_verify
    from loop.models import Exchange, ExchangeStatus, SessionEvent
    from loop.verify import load_session_rows, verify_rows

    seqs = list(SessionEvent.objects.order_by("session_id", "seq").values_list("session_id", "seq"))
    by_session: dict[int, list[int]] = {}
    for session_id, seq in seqs:
        by_session.setdefault(session_id, []).append(seq)
    lines = (workdir / "events.log").read_text().splitlines() if (workdir / "events.log").exists() else []
    effects = [line.split()[1] for line in lines if line.startswith("effect ")]
    approved: set[str] = set()
    unapproved = 0
    for line in lines:  # an effect of a call that needs approval counts only after its approval
        kind, key = line.split()
        if kind == "approve":
            approved.add(key)
        elif require and key not in approved:
            unapproved += 1
    exchanges = list(Exchange.objects.values("pk", "status", "outcome", "session_id"))
    findings = [f for session_id in by_session for f in verify_rows(load_session_rows(session_id))]  # type: ignore[arg-type]
    report = chain_verify()
    return {
        "exchanges": exchanges,
        "settled_or_parked": all(e["status"] in (ExchangeStatus.SETTLED, ExchangeStatus.PARKED) for e in exchanges),
        "seq_dense": all(s == list(range(1, len(s) + 1)) for s in by_session.values()),
        "effects": effects,
        "duplicated": len(effects) - len(set(effects)),
        "unapproved": unapproved,
        "findings": [str(f) for f in findings],
        "chain_ok": bool(getattr(report, "ok", False)),
        "compactions": SessionEvent.objects.filter(kind="compaction").count(),
        "probes": SessionEvent.objects.filter(kind="control:compaction_probe").count(),
        "seconds": seconds,
    }


def main(argv: list[str]) -> int:
    role, workdir = argv[0], Path(argv[1])
    _setup()
    if role == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return 0
    from loop.driver import run_turns_keyed
    from loop.models import ToolCall, ToolCallStatus

    if role == "history":
        for number in range(1, 4):
            run_turns_keyed(_env(workdir, require=False), request_key=f"history-{number}", content=f"go {number}")
        return 0
    if role in ("turn", "park"):
        run_turns_keyed(_env(workdir, require=role == "park"), request_key=f"{role}-1", content="go",
                        claim_token=f"worker-{os.getpid()}")
        return 0
    if role == "approve":
        from loop.recovery import resolve_pending

        env = _env(workdir, require=True)
        call = ToolCall.objects.select_related("frame").get(status=ToolCallStatus.AWAITING_HUMAN)
        (workdir / "approved").touch()
        with (workdir / "events.log").open("a") as log:
            log.write(f"approve {call.call_key}\n")
        resolve_pending(env, call, resolution="approve", reason="", claim_token=f"resolver-{os.getpid()}")
        return 0
    if role == "report":  # the real stack recovered (its sweep); only check
        print(json.dumps(_report(workdir, require=True, seconds=float(os.environ.get("CRASH_SECONDS", "0")))))
        return 0
    if role == "recover":
        require = (workdir / "approved").exists()
        print(json.dumps(_recover(workdir, require=require, timeout=float(os.environ.get("CRASH_TIMEOUT", "20")))))
        return 0
    raise SystemExit(f"unknown role {role!r}; one of {ROLES}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
