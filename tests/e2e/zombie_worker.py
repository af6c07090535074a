"""A worker process for the zombie campaign: ``python -m tests.e2e.zombie_worker ROLE DIR``.

The real kernel, the real built-in ``execute_cmd`` and ``write_file``, the real store and audit
chain, on the database its environment names, with its own ``SKALD_WORKSPACE_ROOT`` (two machines).

Roles:
    drive    worker A: a message whose model runs a slow allow-listed command that rewrites
             ``notes.md`` (the campaign SIGSTOPs A while it runs, past its lease)
    recover  worker B: wait for the lapsed lease, recover the exchange (the command is recorded
             ``interrupted``), the model writes a newer ``notes.md``, the exchange settles
    report   the figures as JSON: effects per call, stale writes applied, refusals recorded
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

STALE = "stale from the zombie\n"
NEWER = "newer from the worker that took over\n"


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    import django

    django.setup()


class ScriptProvider:
    """The command first; after its (interrupted) result, a newer ``notes.md``; then an answer."""

    name = "zombie-script"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def stream(self, request: Any, *, cancel: Any) -> Iterator[Any]:
        from loop.providers.base import ToolResultMessage
        from loop.providers.loopback import text_turn, tool_turn

        answered = sum(1 for message in request.messages if isinstance(message, ToolResultMessage))
        if answered == 0:  # the effect is logged outside the workspace, then notes.md rewritten, slowly
            script = f"echo effect >> {self.workdir / 'effects.log'}; printf '{STALE}' > notes.md; sleep 2"
            yield from tool_turn(("execute_cmd", {"argv": ["sh", "-c", script]}))
        elif answered == 1:
            yield from tool_turn(("write_file", {"path": "notes.md", "content": NEWER}))
        else:
            yield from text_turn("done")


def _env(workdir: Path) -> Any:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from loop.driver import LoopEnv
    from loop.models import Session
    from loop.ports import AgentSpec, GateCall, GateVerdict, TurnScope
    from skald.loop_adapters.bus import ChannelsBus
    from skald.loop_adapters.store import kernel_store
    from skald.sessions.workspace import workspace_for
    from skald.tools.catalog import BUILTIN_TOOLS

    class Allow:
        def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
            return GateVerdict("allow")

        def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
            return {}

    user, _ = get_user_model().objects.get_or_create(username="alice")
    store = kernel_store()
    session = Session.objects.filter(owner=user).first() or store.create_session(
        owner_id=user.pk, agent="zombie", source="web", title="zombie", principal=f"user:{user.pk}")
    tools = BUILTIN_TOOLS.subset(["execute_cmd", "write_file"])
    agent = AgentSpec(name="zombie", kind="chat", system_prompt="zombie test", tools=("execute_cmd", "write_file"),
                      client="")
    scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{user.pk}", user_id=user.pk,
                      agent="zombie", workspace=workspace_for(session.pk))
    assert str(settings.SKALD_WORKSPACE_ROOT) in str(scope.workspace)
    return LoopEnv(store=store, provider=ScriptProvider(workdir), tools=tools, gate=Allow(), agent=agent,
                   scope=scope, bus=ChannelsBus(), cancel_poll_interval=0.05)


def _recover(workdir: Path, timeout: float) -> None:
    from django.conf import settings

    from loop.models import Exchange, ExchangeStatus
    from loop.recovery import recover_exchange
    from skald.core.ids import new_token

    env = _env(workdir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # a failure guard, not a measurement
        for exchange_id in env.store.exchanges.needing_recovery(unclaimed_for=settings.SKALD_LEASE_SECONDS):
            recover_exchange(env, exchange_id, claim_token=f"worker-b-{new_token()}")
        if Exchange.objects.filter(status=ExchangeStatus.SETTLED).exists():
            return
        time.sleep(0.1)
    raise SystemExit("worker B: the exchange did not settle")


def _report(workdir: Path) -> dict[str, Any]:
    from audit.kinds import AuditKind
    from audit.models import AuditEvent
    from audit.services import chain_verify
    from loop.events import EventKind
    from loop.models import Exchange, SessionEvent, ToolCall
    from loop.verify import load_session_rows, verify_rows
    from skald.models import WorkspaceFile

    log = workdir / "effects.log"
    effects = log.read_text().splitlines().count("effect") if log.exists() else 0
    stale = hashlib.sha256(STALE.encode()).hexdigest()
    applied = sum(1 for row in AuditEvent.objects.filter(kind=AuditKind.WORKSPACE_FILE_WRITTEN)
                  if json.loads(row.payload).get("digest") == stale)
    notes = WorkspaceFile.objects.filter(path="notes.md").select_related("blob").first()
    refused = [event.payload for event in SessionEvent.objects.filter(kind=EventKind.EFFECT_REFUSED)]
    sessions = set(SessionEvent.objects.values_list("session_id", flat=True))
    findings = [str(f) for s in sessions for f in verify_rows(load_session_rows(s))]  # type: ignore[arg-type]
    return {
        "calls": ToolCall.objects.filter(tool="execute_cmd").count(),
        "effects": effects,
        "stale_applied": applied,
        "notes": bytes(notes.blob.content).decode() if notes else None,
        "newer_kept": bool(notes and bytes(notes.blob.content).decode() == NEWER),
        "refused": refused,
        "interrupted": list(ToolCall.objects.filter(tool="execute_cmd").values_list("status", flat=True)),
        "settled": list(Exchange.objects.values_list("status", flat=True)),
        "findings": findings,
        "chain_ok": bool(getattr(chain_verify(), "ok", False)),
    }


def main(argv: list[str]) -> int:
    role, workdir = argv[0], Path(argv[1])
    _setup()
    if role == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return 0
    if role == "drive":
        from loop.driver import run_turns_keyed
        from loop.errors import LeaseLost

        try:
            run_turns_keyed(_env(workdir), request_key="zombie-1", content="go", claim_token=f"worker-a-{os.getpid()}")
        except LeaseLost:
            return 3  # taken over while stopped: the expected ending of a zombie
        return 0
    if role == "recover":
        _recover(workdir, timeout=float(os.environ.get("ZOMBIE_TIMEOUT", "60")))
        return 0
    if role == "report":
        print(json.dumps(_report(workdir)))
        return 0
    raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
