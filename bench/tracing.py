"""The kernel turn with tracing on against tracing off (issue 33): ``python -m bench.tracing``.

The bench turn of :mod:`bench.kernel` (one user message, one echo call, two provider calls, the real
store and audit chain on a fresh SQLite file; a new session every 25 pairs, so no compaction and no
long window land on one side), in pairs of adjacent turns in random order, tracing off (the
kernel's no-op seam) and on (``skald.tracing.configure``: the SDK's batch span processor exporting
OTLP/HTTP protobuf to :mod:`bench.otlp_receiver`, a real receiver in a process of its own), so a
loaded machine's drift falls on both alike. The batch is held (a long schedule, a large batch)
and flushed every ``flush_every`` traced turns; the flush's CPU (encoding and sending) is charged
to the traced turns. Figures are this process's CPU (every thread) per turn.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.kernel import CPU_SECONDS, bench_provider, build_env, configure_django, create_session, run_turn

TARGET_OVERHEAD = 0.05  # at most 5 % more CPU per turn with tracing on


def measure(*, turns: int, warmup: int, flush_every: int, workspace: Path, session_turns: int = 25
            ) -> dict[str, object]:
    from django.contrib.auth import get_user_model

    from loop import tracing
    from skald.tracing import configure, otel

    receiver = subprocess.Popen([sys.executable, "-m", "bench.otlp_receiver"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None and receiver.stdin is not None
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.stdout.readline().strip()
    os.environ.setdefault("OTEL_SERVICE_NAME", "skald-bench")
    # Held until each timed flush: no export runs in the background of an untraced turn.
    os.environ.update({"OTEL_BSP_SCHEDULE_DELAY": "3600000", "OTEL_BSP_MAX_QUEUE_SIZE": "100000",
                       "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100000"})
    user = get_user_model().objects.create_user(username="alice")
    provider = bench_provider()
    env = build_env(create_session(user.pk, "tracing bench"), provider, workspace)
    assert configure()
    traced, exporter = tracing.tracer, otel.processor()
    assert exporter is not None

    def switch(mode: str) -> None:  # the tracer stays built: a turn toggles the kernel's seam only
        if mode == "on":
            tracing.install(traced)
        else:
            tracing.uninstall()
    number = 0
    for _ in range(warmup):  # both paths warm (the SDK's first spans, the exporter's connection)
        for mode in ("on", "off"):
            switch(mode)
            number += 1
            run_turn(env, provider, number)
    exporter.force_flush()
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    differences: list[float] = []  # on - off, per adjacent pair of turns on the same session
    flush_s = 0.0
    CPU_SECONDS.clear()
    order = random.Random(33)
    for pair in range(turns // 2):
        if pair % session_turns == 0:  # a fresh session now and then: no compaction, no long window
            env = build_env(create_session(user.pk, f"tracing bench {pair}"), provider, workspace)
        modes = ("on", "off") if order.random() < 0.5 else ("off", "on")  # the order of a pair is random
        for mode in modes:
            switch(mode)
            number += 1
            run_turn(env, provider, number)
            cpu[mode].append(CPU_SECONDS[-1] * 1000)
        differences.append(cpu["on"][-1] - cpu["off"][-1])
        if len(cpu["on"]) % flush_every == 0:
            tracing.uninstall()
            started = time.process_time()
            exporter.force_flush()
            flush_s += time.process_time() - started
    started = time.process_time()
    otel.shutdown()  # the last flush
    flush_s += time.process_time() - started
    receiver.stdin.close()
    spans = int(receiver.stdout.readline().strip() or 0)
    receiver.wait(10)
    flush_ms = flush_s * 1000 / len(cpu["on"])
    off, on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    mean_off, mean_on = statistics.fmean(cpu["off"]), statistics.fmean(cpu["on"])
    paired = statistics.median(differences)
    return {"turns": turns, "flush_every": flush_every, "off_ms": off, "on_ms": on, "flush_ms": flush_ms,
            "paired_ms": paired, "overhead": (paired + flush_ms) / off,
            "mean_off_ms": mean_off, "mean_on_ms": mean_on,
            "mean_overhead": (mean_on + flush_ms) / mean_off - 1, "spans_received": spans,
            "spans_per_turn": spans / (len(cpu["on"]) + warmup)}


def report(result: dict[str, object]) -> str:
    overhead = float(result["overhead"])  # type: ignore[arg-type]
    passed = overhead <= TARGET_OVERHEAD
    return "\n".join([
        f"  turns                {result['turns']} one-tool turns (SQLite, fresh file), alternating off / on",
        f"  CPU per turn, off    {result['off_ms']:.2f} ms median (mean {result['mean_off_ms']:.2f} ms)",
        f"  CPU per turn, on     {result['on_ms']:.2f} ms median (mean {result['mean_on_ms']:.2f} ms) + "
        f"{result['flush_ms']:.2f} ms per turn for the batch export (encode + send to a loopback OTLP/HTTP "
        f"receiver, every {result['flush_every']} traced turns)",
        f"  traced - untraced    {result['paired_ms']:+.3f} ms median difference within a pair of adjacent turns "
        "(random order)",
        f"  overhead             {overhead * 100:+.1f} % ((paired difference + export) / off median; "
        f"{float(result['mean_overhead']) * 100:+.1f} % on means)   target <= {TARGET_OVERHEAD * 100:g} %  "  # type: ignore[arg-type]
        f"[{'PASS' if passed else 'FAIL'}]",
        f"  spans exported       {result['spans_received']} received "
        f"({float(result['spans_per_turn']):.1f} per traced turn)",  # type: ignore[arg-type]
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--flush-every", type=int, default=100)
    parser.add_argument("--result-file", type=Path)
    args = parser.parse_args(argv)
    configure_django()
    from django.conf import settings

    result = measure(turns=args.turns, warmup=args.warmup, flush_every=args.flush_every,
                     workspace=Path(settings.VAR_DIR) / "workspace")
    print(report(result), flush=True)
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
