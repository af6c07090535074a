"""What a driver is given: the injected dependencies of one loop (persisted state lives in the store).

Kept apart from the persisted state, as pydantic-ai keeps its run dependencies apart from its
message history: a worker builds a :class:`LoopEnv` per exchange from the product's adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loop.bounds import Bounds
from loop.compaction.policy import CompactionPolicy
from loop.context import DEFAULT_CONTEXT, ContextBuilder
from loop.hooks import LoopHooks
from loop.ports import AgentSpec, EventBus, FrameAgents, Gate, ToolDiscovery, TurnScope
from loop.providers.base import LlmProvider
from loop.store import Store
from loop.tools.fanout import RoundEnv
from loop.tools.registry import ToolRegistry
from loop.tripwires import Detector, default_detector


@dataclass
class LoopEnv:
    """Everything a driver needs, injected. Persisted state lives in the store, not here."""

    store: Store
    provider: LlmProvider
    tools: ToolRegistry
    gate: Gate
    agent: AgentSpec
    scope: TurnScope
    bus: EventBus
    bounds: Bounds = field(default_factory=Bounds)
    hooks: LoopHooks = field(default_factory=LoopHooks.pass_through)
    discovery: ToolDiscovery | None = None
    context: ContextBuilder = DEFAULT_CONTEXT
    detector: Detector = field(default_factory=default_detector)  # credential tripwires (SPEC L16)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    cancel_poll_interval: float = 0.2
    narrative: str = ""
    # Told (in the same transaction) of calls a stop cancels, with the acting principal.
    calls_canceled: Callable[[Sequence[int], str], object] | None = None
    # Rebuilds a child frame's agent and model when recovery or a resolver resumes it.
    frame_agents: FrameAgents | None = None

    def __post_init__(self) -> None:
        # An agent's or deployment's payload cap reaches every row this loop writes.
        self.store = self.store.capped(self.bounds.payload_cap)

    @property
    def principal(self) -> str:
        return self.scope.principal

    def round_env(self, narrative: str | None = None) -> RoundEnv:
        return RoundEnv(store=self.store, tools=self.tools, gate=self.gate, scope=self.scope, bounds=self.bounds,
                        principal=self.principal, narrative=self.narrative if narrative is None else narrative,
                        detector=self.detector)
