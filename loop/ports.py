"""The Protocols through which the product plugs into the kernel (the seed's ``loop_adapters`` traits).

The kernel imports nothing from Skald; Skald implements these under ``skald/loop_adapters/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from loop.cancellation import CancelToken
from loop.providers.base import ToolSpec

if TYPE_CHECKING:
    from loop.parking import ParkEntry


class Clock(Protocol):
    def now(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit row as the store hands it to :meth:`AuditSink.append_statement`."""

    label: str
    principal: str
    subject_type: str
    subject_id: str
    payload: Mapping[str, Any]


class AuditSink(Protocol):
    """Appends audit rows inside the caller's transaction. ``label`` is a dotted kind label."""

    def append(
        self, label: str, *, principal: str, subject_type: str, subject_id: str, payload: Mapping[str, Any]
    ) -> None: ...

    def append_statement(self, records: Sequence[AuditRecord]) -> tuple[str, list[Any]]:
        """``records`` in order, as ``append`` would write them one by one: returns the one SQL
        statement (and its parameters) that the store runs in this transaction before it commits,
        or ``("", [])`` when the sink keeps nothing in the database."""
        ...


class EventBus(Protocol):
    """Wakes viewers of a session. ``committed`` runs after the transaction commits; ``delta``
    carries live, non-durable turn deltas (a viewer that misses them loses nothing durable)."""

    def committed(self, session_id: int, last_seq: int) -> None: ...

    def delta(self, session_id: int, payload: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnScope:
    """Per-turn scope: who the turn acts for. A call with no scope is denied (SPEC A1)."""

    session_id: int
    exchange_id: int
    principal: str  # "user:<id>"
    user_id: int | None
    agent: str
    workspace: Path
    source: str = "web"
    extras: Mapping[str, Any] = field(default_factory=dict)
    # The programs this frame's ``execute_cmd`` may run, already narrowed from its parent's (SPEC
    # S2: a child's process grant is the parent's ∩ its ask). None: the deployment's, unnarrowed.
    exec_allowlist: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class GateCall:
    call_id: int
    key: str
    tool: str
    arguments: Mapping[str, Any]
    arguments_hash: str
    # A call made in a tainted frame: its provenance (loop/provenance.py ``Provenance.as_dict`` and
    # the seq of its ``control:provenance`` row); None in an untainted frame.
    provenance: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GateVerdict:
    action: Literal["allow", "deny", "require"]
    reason: str = ""
    rule_id: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


class Gate(Protocol):
    """Decides whether a call may run. ``park`` records a ``require`` durably (in the caller's
    transaction) so a human can resolve it later, after any restart."""

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict: ...

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]: ...


class CallingFrame(Protocol):
    """The frame a tool call runs in, as a delegate needs it (a ``loop.frame_link.FrameLink``)."""

    @property
    def tools(self) -> tuple[str, ...]: ...

    @property
    def agent(self) -> AgentSpec: ...

    @property
    def exchange_id(self) -> int: ...

    @property
    def depth(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool gets: the session's real context (workspace, user), never the server's cwd.

    ``timeout`` is None for a tool that declares none (a delegate: its child loop is bounded by its
    own turns, the tree's budget and the stop). ``frame`` is the calling frame, for delegates.
    ``fence`` is the driver's ``(exchange id, claim token)``: an effect the tool commits after its
    work checks it in the effect's own transaction (``Store.fenced(*fence).hold_fence``), so a
    driver taken over while the tool ran commits nothing (None: not run by a driver).
    """

    scope: TurnScope
    call_key: str
    cancel: CancelToken
    timeout: float | None
    call_id: int = 0
    frame: CallingFrame | None = None
    fence: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class DelegateReturn:
    """What a delegate tool returns instead of text: the parent call's result (its text and
    status), and the one ``subagent_result`` payload recorded with it in the same transaction."""

    content: str
    status: str  # a ToolCallStatus value: completed | failed | canceled | awaiting_human
    subagent: Mapping[str, Any]
    # awaiting_human: the child parked; its waiting calls with their park callbacks (the whole tree
    # parks, the parent's call stays running until the child resumes and ends).
    parked: Sequence[ParkEntry] = ()


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    @property
    def concurrency_safe(self) -> bool: ...

    @property
    def restart_hint(self) -> str:  # a loop.tools.hints.RestartHint value
        ...

    def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str | DelegateReturn: ...

    # Optional, read with ``getattr`` (loop/provenance.py): ``trust`` ("trusted" | "untrusted", the
    # label of the tool's results; an MCP proxy has ``trusted``), ``read_only`` (else
    # ``concurrency_safe``), ``writes_path`` / ``reads_path`` (the argument naming a workspace file
    # the tool writes or reads: a file written in a tainted frame is untrusted when read back).


class ToolDiscovery(Protocol):
    """Told which tools are offered to a model, so every tool can be gated (SPEC A5)."""

    def offered(self, specs: Sequence[ToolSpec]) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    kind: str
    system_prompt: str
    tools: tuple[str, ...]
    client: str
    strength: int = 1
    description: str = ""
    bounds: Mapping[str, Any] = field(default_factory=dict)
    playbook: Sequence[Mapping[str, Any]] = ()
    # The programs this agent asks to run when it is a child; None asks for nothing narrower.
    exec_allowlist: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChildSetup:
    """What a child frame runs as: its own agent, the model its selection chose, its bounds."""

    agent: AgentSpec
    provider: Any  # a loop.providers.base.LlmProvider
    bounds: Any = None  # a loop.bounds.Bounds: the child agent's bounds; the parent's when None


class FrameAgents(Protocol):
    """Rebuilds a child frame after a restart (SPEC R1 step 4: every frame runs as its own agent,
    from the catalog, never the root's): ``agent`` and ``selection`` are the frame's own rows."""

    def child(self, agent: str, selection: Mapping[str, Any]) -> ChildSetup: ...


class AgentCatalog(Protocol):
    def get(self, name: str) -> AgentSpec: ...

    def task_agents(self) -> Sequence[AgentSpec]: ...
