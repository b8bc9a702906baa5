"""The oracle agent: plays the family's gold solution through the same tools an agent has."""

from __future__ import annotations

from typing import Any

from ..envs.core import ToolCall, get_family
from .base import AgentAction, AgentError, EpisodeStart

__all__ = ["OracleAgent"]


class OracleAgent:
    """Solves each task with its gold solution; how users check that tasks are solvable."""

    name = "oracle"

    def __init__(self) -> None:
        self._calls: list[ToolCall] = []

    async def reset(self, start: EpisodeStart) -> None:
        if start.task is None:
            raise AgentError("the oracle needs the task object")
        self._calls = list(get_family(start.family).oracle(start.task))

    async def act(self, observation: str) -> AgentAction:
        call = self._calls.pop(0) if self._calls else ToolCall(name="submit")
        return AgentAction(action=call.model_dump())

    def config(self) -> dict[str, Any]:
        return {"name": self.name}
