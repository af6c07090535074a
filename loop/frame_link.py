"""What a delegate tool sees of the frame that called it (SPEC S1): the calling frame's environment,
rows, the tree's one ledger and the frame's token. The driver hands one to every tool call of a
round; :mod:`loop.delegation` opens a child frame from it."""

from __future__ import annotations

from dataclasses import dataclass

from loop.budgets import DispatchAuthority
from loop.cancellation import CancelToken
from loop.env import LoopEnv
from loop.models import Exchange, Frame
from loop.ports import AgentSpec


@dataclass(frozen=True)
class FrameLink:
    """The calling frame: its environment, rows, the tree's ledger and the frame's token."""

    env: LoopEnv
    exchange: Exchange
    frame: Frame
    authority: DispatchAuthority
    token: CancelToken

    @property
    def tools(self) -> tuple[str, ...]:
        return self.env.tools.names()

    @property
    def agent(self) -> AgentSpec:
        return self.env.agent

    @property
    def exchange_id(self) -> int:
        return self.exchange.pk

    @property
    def depth(self) -> int:
        return self.frame.depth
