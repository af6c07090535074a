"""Run in a subprocess by test_crash.py: drive exchanges on a session until a failpoint kills us.

Usage: ``python tests/loop/compaction/crash_child.py SESSION_ID FIRST_NUMBER LAST_NUMBER``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import django

django.setup()

from loop.driver import LoopEnv, run_turns_keyed  # noqa: E402
from loop.models import Session  # noqa: E402
from loop.ports import AgentSpec, TurnScope  # noqa: E402
from loop.store import Store  # noqa: E402
from tests.loop.compaction.conftest import SMALL, scripted_model  # noqa: E402
from tests.loop.conftest import TEST_TOOLS  # noqa: E402
from tests.loop.fakes import MemoryAuditSink, MemoryBus, ScriptedGate, SteppingClock  # noqa: E402


def main(session_id: int, first: int, last: int) -> None:
    session = Session.objects.get(pk=session_id)
    agent = AgentSpec(name="tester", kind="chat", system_prompt="You test.", tools=TEST_TOOLS.names(), client="")
    scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{session.owner_id}",
                      user_id=session.owner_id, agent="tester", workspace=Path("/nonexistent"))
    bus = MemoryBus()
    store = Store(audit=MemoryAuditSink(), clock=SteppingClock(), bus=bus)
    env = LoopEnv(store=store, provider=scripted_model(), tools=TEST_TOOLS, gate=ScriptedGate(),
                  agent=agent, scope=scope, bus=bus, compaction=SMALL)
    for number in range(first, last + 1):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
