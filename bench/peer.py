"""The bench turn through a peer: LangGraph's agent (LangChain's ``create_agent``) checkpointing to
the same databases, on the same machine, for the comparison issue 14 is about ("a durable turn
cheaper than an undurable peer's").

The same exchange as :mod:`bench.kernel`: a user message → the model asks for one ``echo`` call →
the tool runs → the model answers, two model calls, on one long thread (20 warm-up turns on
another, then 400), and the same figure: the wall time of the turn minus the time inside the
model. The model is a scripted chat model (no network); the checkpointer is LangGraph's own
``PostgresSaver`` on a fresh database of the same server, or ``SqliteSaver`` on a fresh file, with
``durability="sync"``: each step's checkpoint is written before the next step starts, the closest
LangGraph comes to Skald's "committed before the effect". The peer writes no audit chain, no
receipt and no idempotency key.

This module runs in its own virtualenv (``var/bench/peer-venv``, which ``make bench`` makes from
pyproject's ``peer`` extra), so the peer's dependencies never enter Skald's: it imports neither
Django nor Skald.

``python -m bench.peer --database sqlite|postgresql://… [--turns N] [--result-file F]``: the PostgreSQL
database must be empty (``make bench`` drops and creates it first).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from bench.turn_shape import TURNS, WARMUP_TURNS, PeerResult, ends, peer_main

DURABILITY = "sync"


class ScriptedChat(BaseChatModel):
    """After a user message, one ``echo`` call; after the tool's result, the answer. The time spent
    here is the model's, and is subtracted like the bench's provider time."""

    seconds: float = 0.0
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChat:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        started = time.perf_counter()
        self.calls += 1
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        if isinstance(messages[-1], HumanMessage):
            message = AIMessage(content="", usage_metadata=usage,  # type: ignore[arg-type]
                                tool_calls=[{"name": "echo", "args": {"text": "ping"}, "id": f"call_{self.calls}"}])
        else:
            message = AIMessage(content="done", usage_metadata=usage)  # type: ignore[arg-type]
        result = ChatResult(generations=[ChatGeneration(message=message)])
        self.seconds += time.perf_counter() - started
        return result


@tool
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@contextmanager
def checkpointer(database: str) -> Iterator[tuple[Any, str]]:
    """LangGraph's own saver for ``database``, its tables set up; and a line saying what it is."""
    if database == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with tempfile.TemporaryDirectory(prefix="skald-peer-") as tmp, \
                SqliteSaver.from_conn_string(str(Path(tmp) / "peer.sqlite3")) as saver:
            saver.setup()
            journal = saver.conn.execute("PRAGMA journal_mode").fetchone()[0]
            yield saver, f"SqliteSaver, fresh file (journal_mode={journal})"
        return
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = conninfo_to_dict(database)["dbname"]
    with PostgresSaver.from_conn_string(make_conninfo(database)) as saver:
        saver.setup()
        sync = saver.conn.execute("SHOW synchronous_commit").fetchone()
        yield saver, f"PostgresSaver, database {name} (synchronous_commit={next(iter(sync.values()))})"


def measure(database: str, *, turns: int = TURNS, warmup: int = WARMUP_TURNS) -> PeerResult:
    model = ScriptedChat()
    with checkpointer(database) as (saver, label):
        agent = create_agent(model, [echo], system_prompt="You benchmark.", checkpointer=saver)

        def turn(thread: str, number: int) -> tuple[float, float, float]:
            in_model, cpu, started = model.seconds, time.process_time(), time.perf_counter()
            state = agent.invoke({"messages": [HumanMessage(f"ping {number}")]},
                                 {"configurable": {"thread_id": thread}}, durability=DURABILITY)
            wall = time.perf_counter() - started
            if state["messages"][-1].content != "done":
                raise RuntimeError(f"peer turn {number} ended {state['messages'][-1]!r}")
            return wall - (model.seconds - in_model), model.seconds - in_model, time.process_time() - cpu

        for number in range(1, warmup + 1):
            turn("warm-up", number)
        overhead, in_model, cpu = zip(*(turn("long", number) for number in range(1, turns + 1)), strict=True)
    ms = [value * 1000 for value in overhead]
    _edge, first, last = ends(ms)
    return PeerResult(
        peer="LangGraph create_agent", checkpointer=label, durability=DURABILITY, turns=turns,
        median_ms=statistics.median(ms), first_mean_ms=first, last_mean_ms=last, growth=last / first,
        cpu_median_ms=statistics.median(cpu) * 1000, model_median_ms=statistics.median(in_model) * 1000,
        versions=_versions(),
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("langchain", "langgraph", "langchain-core")}


def main(argv: Sequence[str] | None = None) -> int:
    return peer_main(argv, prog="python -m bench.peer", description=__doc__.splitlines()[0], measure=measure,
                     describe=lambda r: f"{r.peer} with {r.checkpointer}, durability={DURABILITY}")


if __name__ == "__main__":
    sys.exit(main())
