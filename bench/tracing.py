"""The kernel turn with tracing on against tracing off (issue 33): ``python -m bench.tracing``.

The bench turn of :mod:`bench.kernel` (one user message, one echo call, two provider calls, the real
store and audit chain on a fresh SQLite file), in alternating blocks: tracing off (the kernel's no-op
seam), then on (``skald.tracing.configure``: the SDK's batch span processor exporting OTLP/HTTP
protobuf to :mod:`bench.otlp_receiver`, a real receiver in a process of its own). An ``on`` block
ends with a flush inside its measured time, so the exporter thread's CPU is counted; a block's
figure is this process's CPU (every thread) divided by its turns. Alternating blocks spread a
loaded machine's drift over both modes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.kernel import CPU_SECONDS, bench_provider, build_env, configure_django, create_session, run_turn

TARGET_OVERHEAD = 0.05  # at most 5 % more CPU per turn with tracing on


def measure(*, blocks: int, per_block: int, warmup: int, workspace: Path) -> dict[str, object]:
    from django.contrib.auth import get_user_model

    from loop import tracing
    from skald.tracing import configure, otel

    receiver = subprocess.Popen([sys.executable, "-m", "bench.otlp_receiver"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None and receiver.stdin is not None
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.stdout.readline().strip()
    os.environ.setdefault("OTEL_SERVICE_NAME", "skald-bench")
    user = get_user_model().objects.create_user(username="alice")
    provider = bench_provider()
    env = build_env(create_session(user.pk, "tracing bench"), provider, workspace)
    number = 0
    for traced in (False, True):  # warm both paths (the SDK's first spans, the exporter's connection)
        if traced:
            configure()
        for _ in range(warmup):
            number += 1
            run_turn(env, provider, number)
        otel.shutdown()
    per_turn: dict[str, list[float]] = {"off": [], "on": []}
    medians: dict[str, list[float]] = {"off": [], "on": []}
    for block in range(blocks):
        mode = "on" if block % 2 else "off"
        if mode == "on":
            configure()
        assert tracing.enabled == (mode == "on")
        CPU_SECONDS.clear()
        cpu = time.process_time()
        for _ in range(per_block):
            number += 1
            run_turn(env, provider, number)
        if mode == "on":
            otel.shutdown()  # flushes what the batch holds: its export is this block's cost
        per_turn[mode].append((time.process_time() - cpu) / per_block * 1000)
        medians[mode].append(statistics.median(CPU_SECONDS) * 1000)
    receiver.stdin.close()
    spans = int(receiver.stdout.readline().strip() or 0)
    receiver.wait(10)
    off, on = statistics.median(per_turn["off"]), statistics.median(per_turn["on"])
    return {"blocks": blocks, "per_block": per_block, "off_ms": off, "on_ms": on, "overhead": on / off - 1,
            "off_turn_median_ms": statistics.median(medians["off"]),
            "on_turn_median_ms": statistics.median(medians["on"]),
            "blocks_off_ms": per_turn["off"], "blocks_on_ms": per_turn["on"], "spans_received": spans,
            "spans_per_turn": spans / (per_block * blocks // 2 + warmup)}


def report(result: dict[str, object]) -> str:
    overhead = float(result["overhead"])  # type: ignore[arg-type]
    passed = overhead <= TARGET_OVERHEAD
    return "\n".join([
        f"  turns                {result['blocks']} alternating blocks of {result['per_block']} one-tool turns "
        "(SQLite, fresh file)",
        f"  CPU per turn, off    {result['off_ms']:.2f} ms (median of the off blocks; per-turn median "
        f"{result['off_turn_median_ms']:.2f} ms)",
        f"  CPU per turn, on     {result['on_ms']:.2f} ms (batch exporter to a loopback OTLP/HTTP receiver, its "
        f"flush included; per-turn median {result['on_turn_median_ms']:.2f} ms)",
        f"  overhead             {overhead * 100:+.1f} %   target <= {TARGET_OVERHEAD * 100:g} %  "
        f"[{'PASS' if passed else 'FAIL'}]",
        f"  spans exported       {result['spans_received']} received ({float(result['spans_per_turn']):.1f} "  # type: ignore[arg-type]
        "per traced turn)",
        "  blocks (ms/turn)     off " + " ".join(f"{v:.2f}" for v in result["blocks_off_ms"])  # type: ignore[attr-defined]
        + " | on " + " ".join(f"{v:.2f}" for v in result["blocks_on_ms"]),  # type: ignore[attr-defined]
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--per-block", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--result-file", type=Path)
    args = parser.parse_args(argv)
    configure_django()
    from django.conf import settings

    result = measure(blocks=args.blocks, per_block=args.per_block, warmup=args.warmup,
                     workspace=Path(settings.VAR_DIR) / "workspace")
    print(report(result), flush=True)
    if args.result_file is not None:
        args.result_file.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
