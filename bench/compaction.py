"""The compaction benchmark: one session of 2,000 turns, with compaction on (its defaults, but the
per-episode quota, which one session of 2,000 turns would exceed near turn 800).

One bench turn is one exchange through :func:`loop.driver.run_turns_keyed` on the real store: a
user message → the model asks ``echo`` for a fact-laden text of ~300 tokens → the tool runs → the
model answers. The window crosses the 16k-token threshold every ~50 turns; the loopback model then
writes the deterministic extractive summary (its time counts as provider time, like every stream).

Printed at turns 1, 500, 1,000 and 2,000: the size of the provider request (bytes, as the request
cap counts them; the last request of the turn, which carries the tool result) and the per-turn
overhead, over the 100 turns ending there (about two compaction cycles: the window is a sawtooth
between ~keep and ~keep + threshold tokens), plus the turn's SQL statements and its process CPU time,
which the machine's load moves less than wall time.
Flat means: what the model is sent and what a turn costs stop growing with the session's length.

Run it through ``python -m bench``; alone, ``python -m bench.compaction`` writes into whatever
database the environment names.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.kernel import ECHO, AllowGate, TimedProvider, configure_django, create_session
from loop.cancellation import CancelToken
from loop.compaction.extractive import extractive_summary
from loop.compaction.policy import CompactionPolicy
from loop.compaction.prompt import is_summary_request
from loop.compaction.tokens import encoding
from loop.dispatch import request_bytes
from loop.outcomes import Completed
from loop.ports import AgentSpec, TurnScope
from loop.providers.base import Delta, ProviderRequest, ToolResultMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.tools.registry import ToolRegistry

TURNS = 2000
CHECKPOINTS = (1, 500, 1000, 2000)
SPAN = 100  # turns (about two compaction cycles) summarised at each checkpoint
WARMUP = 20
TARGET_FLAT = 1.25  # turn 2,000 / turn 500, for the request size and the overhead


def fact(number: int) -> str:
    return (f"turn {number}: host web-{number % 97} answered ERR_{number % 503} from /srv/app/module_{number % 89}.py "
            f"during build 4.{number % 13}.{number % 7}; request req_{number:05d} waited {number % 997} ms on "
            f"pool_{number % 11}. ") * 4


def model(request: ProviderRequest) -> list[Delta]:
    if is_summary_request(request):
        return text_turn(extractive_summary(request.messages[0].content))
    if request.messages and isinstance(request.messages[-1], ToolResultMessage):
        return text_turn("done")
    number = int(str(request.messages[-1].content).split()[-1])
    return tool_turn(("echo", {"text": fact(number)}))


class SizedProvider(TimedProvider):
    """Also records the byte size of each conversation request (summary requests apart)."""

    def __init__(self, inner: LoopbackProvider) -> None:
        super().__init__(inner)
        self.sizes: list[int] = []
        self.summaries = 0

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        if is_summary_request(request):
            self.summaries += 1
        else:
            self.sizes.append(request_bytes(request))
        return super().stream(request, cancel=cancel)


@dataclass
class Checkpoint:
    turn: int
    request_bytes: int  # the turn's last conversation request
    window_mean_bytes: float  # over the SPAN turns ending here
    window_max_bytes: int
    queries: int  # SQL statements of the turn
    cpu_ms: float  # median process CPU time per turn over the span (less load-sensitive than wall)
    overhead_ms: float  # median wall time minus provider time over the span


@dataclass
class CompactionResult:
    backend: str
    turns: int
    checkpoints: list[Checkpoint] = field(default_factory=list)
    compactions: int = 0
    results: dict[str, int] = field(default_factory=dict)
    max_request_bytes: int = 0
    run_s: float = 0.0

    def at(self, turn: int) -> Checkpoint:
        return next(c for c in self.checkpoints if c.turn == turn)


def measure(*, turns: int, workspace: Path) -> CompactionResult:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from loop.driver import LoopEnv, run_turns_keyed
    from loop.models import SessionEvent
    from skald.loop_adapters.bus import ChannelsBus
    from skald.loop_adapters.store import kernel_store

    user = get_user_model().objects.create_user(username="bench-compaction")
    provider = SizedProvider(LoopbackProvider([model], repeat_last=True))
    tools = ToolRegistry([ECHO])
    agent = AgentSpec(name="bench", kind="chat", system_prompt="You benchmark.", tools=tools.names(), client="")

    def env_for(title: str) -> tuple[LoopEnv, int]:
        session = create_session(user.pk, title)
        scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{user.pk}", user_id=user.pk,
                          agent="bench", workspace=workspace)
        # One session is one compaction episode (SPEC L14): at the default quota (16) this one
        # conversation would stop loudly near turn 800, so the bench lifts the quota to measure cost.
        return LoopEnv(store=kernel_store(), provider=provider, tools=tools, gate=AllowGate(), agent=agent,
                       scope=scope, bus=ChannelsBus(), compaction=CompactionPolicy(max_per_episode=turns)), session.pk

    encoding()  # loading the tokenizer (~0.3 s, once per process) is not a turn's cost
    warm, _ = env_for("warm-up")
    for number in range(1, WARMUP + 1):
        run_turns_keyed(warm, request_key=f"w{number}", content=f"warm {number}")
    env, session_id = env_for("2,000 turns")
    provider.sizes.clear()
    provider.summaries = 0
    overhead: list[float] = []
    cpu: list[float] = []
    last_size: list[int] = []
    queries: dict[int, int] = {}
    started = time.perf_counter()
    for number in range(1, turns + 1):
        provider.inner.calls.clear()
        before = provider.seconds
        began, began_cpu = time.perf_counter(), time.process_time()
        if number in CHECKPOINTS:
            with CaptureQueriesContext(connection) as captured:
                result = run_turns_keyed(env, request_key=f"c{number}", content=f"check {number}")
            queries[number] = len(captured.captured_queries)
        else:
            result = run_turns_keyed(env, request_key=f"c{number}", content=f"check {number}")
        wall = time.perf_counter() - began
        cpu.append((time.process_time() - began_cpu) * 1000)
        if not isinstance(result.outcome, Completed):
            raise RuntimeError(f"turn {number} ended {result.outcome!r}")
        overhead.append((wall - (provider.seconds - before)) * 1000)
        last_size.append(provider.sizes[-1])
    run_s = time.perf_counter() - started
    reports = Counter(SessionEvent.objects.filter(session_id=session_id, kind="control:compaction_probe")
                      .values_list("payload__result", flat=True))
    out = CompactionResult(backend=connection.vendor, turns=turns, compactions=provider.summaries,
                           results=dict(reports), max_request_bytes=max(provider.sizes), run_s=run_s)
    for turn in (c for c in CHECKPOINTS if c <= turns):
        span = slice(max(0, turn - SPAN), turn)
        out.checkpoints.append(Checkpoint(
            turn, last_size[turn - 1], statistics.fmean(last_size[span]), max(last_size[span]), queries[turn],
            statistics.median(cpu[span]), statistics.median(overhead[span])))
    return out


def report(result: CompactionResult) -> str:
    lines = [f"  {'turn':>5}  {'request bytes':>13}  {'mean / max of the last ' + str(SPAN):>26}  {'queries':>7}  "
             f"{'cpu median':>10}  {'overhead median':>15}"]
    for c in result.checkpoints:
        lines.append(f"  {c.turn:>5}  {c.request_bytes:>13,}  {c.window_mean_bytes:>14,.0f} / "
                     f"{c.window_max_bytes:>9,}  {c.queries:>7}  {c.cpu_ms:>7.2f} ms  {c.overhead_ms:>12.2f} ms")
    if len(result.checkpoints) == len(CHECKPOINTS):
        first, last = result.at(500), result.at(2000)
        size = last.window_max_bytes / first.window_max_bytes
        cost = last.cpu_ms / first.cpu_ms
        verdict = "PASS" if size <= TARGET_FLAT and cost <= TARGET_FLAT and last.queries <= first.queries + 2 \
            else "FAIL"
        lines.append(f"  flat: turn 2000 / turn 500 = {size:.2f}x largest request, {cost:.2f}x cpu per turn, "
                     f"{last.queries} vs {first.queries} queries (target <= {TARGET_FLAT}x) [{verdict}]")
    results = ", ".join(f"{k} {v}" for k, v in sorted(result.results.items()))
    lines.append(f"  compactions          {result.compactions} ({results}); largest request "
                 f"{result.max_request_bytes:,} bytes; {result.turns} turns in {result.run_s:.1f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--result-file", type=Path)
    args = parser.parse_args(argv)
    configure_django()
    from django.conf import settings

    result = measure(turns=args.turns, workspace=Path(settings.VAR_DIR) / "workspace")
    print(report(result), flush=True)
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(asdict(result)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
