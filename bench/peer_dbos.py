"""The bench turn through a second peer (issue 34): a DBOS Transact durable workflow of model step,
tool step, model step, checkpointing to the same databases, on the same machine.

The same exchange as :mod:`bench.kernel` and :mod:`bench.peer`: a user message → the model asks for
one ``echo`` call → the tool runs → the model answers; 20 warm-up turns, then 400, and the same
figure: the wall time of the turn minus the time inside the model. Each turn is one workflow (its
input, each step's output and its result are written to DBOS's system database before the next step
starts: DBOS's own durability). The model is scripted (no network). DBOS writes no audit chain, no
receipt and no conversation history (each workflow gets only its message).

Runs in the peer's virtualenv (``var/bench/peer-venv``, pyproject's ``peer`` extra): no Django, no Skald.
``python -m bench.peer_dbos --database sqlite|postgresql://… [--turns N] [--result-file F]``: the
PostgreSQL database must be empty (``make bench`` drops and creates it first).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig

from bench.turn_shape import TURNS, WARMUP_TURNS, PeerResult, ends, peer_main

MODEL_SECONDS = [0.0]  # time inside the scripted model, subtracted like the kernel bench's provider time


@DBOS.step()
def model_step(messages: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    usage = {"input_tokens": 10, "output_tokens": 5}
    if messages[-1]["role"] == "user":
        reply = {"role": "assistant", "content": "", "usage": usage,
                 "tool_calls": [{"id": f"call_{len(messages)}", "name": "echo", "args": {"text": "ping"}}]}
    else:
        reply = {"role": "assistant", "content": "done", "usage": usage}
    MODEL_SECONDS[0] += time.perf_counter() - started
    return reply


@DBOS.step()
def echo_step(text: str) -> str:
    return f"echo: {text}"


@DBOS.workflow()
def turn_workflow(message: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": message}]
    reply = model_step(messages)
    messages.append(reply)
    for call in reply.get("tool_calls", []):
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": echo_step(call["args"]["text"])})
    answer = model_step(messages)
    return str(answer["content"])


def measure(database: str, *, turns: int = TURNS, warmup: int = WARMUP_TURNS) -> PeerResult:
    with tempfile.TemporaryDirectory(prefix="skald-dbos-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'dbos.sqlite'}" if database == "sqlite" else database
        config: DBOSConfig = {"name": "skald-bench", "system_database_url": url, "run_admin_server": False}
        DBOS(config=config)
        DBOS.launch()
        try:
            def turn(number: int) -> tuple[float, float, float]:
                in_model, cpu, started = MODEL_SECONDS[0], time.process_time(), time.perf_counter()
                answer = turn_workflow(f"ping {number}")
                wall = time.perf_counter() - started
                if answer != "done":
                    raise RuntimeError(f"DBOS turn {number} ended {answer!r}")
                model = MODEL_SECONDS[0] - in_model
                return wall - model, model, time.process_time() - cpu

            for number in range(1, warmup + 1):
                turn(-number)
            overhead, in_model, cpu = zip(*(turn(number) for number in range(1, turns + 1)), strict=True)
        finally:
            DBOS.destroy()
    ms = [value * 1000 for value in overhead]
    _edge, first, last = ends(ms)
    label = "SQLite system database, fresh file" if database == "sqlite" else "PostgreSQL system database"
    return PeerResult(
        peer="DBOS Transact workflow", checkpointer=label, durability="each step", turns=turns,
        median_ms=statistics.median(ms), first_mean_ms=first, last_mean_ms=last, growth=last / first,
        cpu_median_ms=statistics.median(cpu) * 1000, model_median_ms=statistics.median(in_model) * 1000,
        versions={"dbos": _version()},
    )


def _version() -> str:
    from importlib.metadata import version

    return version("dbos")


def main(argv: Sequence[str] | None = None) -> int:
    return peer_main(argv, prog="python -m bench.peer_dbos", description=__doc__.splitlines()[0], measure=measure,
                     describe=lambda r: f"{r.peer} with {r.checkpointer}")


if __name__ == "__main__":
    sys.exit(main())
