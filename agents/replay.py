"""Replays the actions of recorded trajectories: ``replay:PATH`` (a run directory or one trajectory file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .base import AgentAction, AgentError, EpisodeStart

__all__ = ["ReplayAgent"]


class ReplayAgent:
    """For each task, the actions of the first recorded episode of that task, in order."""

    name = "replay"

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        files = sorted((self.path / "trajectories").glob("*.json")) if self.path.is_dir() else [self.path]
        if not files or not all(f.is_file() for f in files):
            raise AgentError(f"replay: no trajectories at {self.path}")
        self._by_task: dict[str, list[Any]] = {}
        for file in files:
            record = json.loads(file.read_text())
            self._by_task.setdefault(record["task_id"], [s["action"] for s in record.get("steps", [])])
        self._queue: list[Any] = []

    async def reset(self, start: EpisodeStart) -> None:
        if start.task_id not in self._by_task:
            raise AgentError(f"replay: no recorded episode of task {start.task_id} in {self.path}")
        self._queue = list(self._by_task[start.task_id])

    async def act(self, observation: str) -> AgentAction:
        if not self._queue:
            return AgentAction(action={"name": "submit", "arguments": {}})
        return AgentAction(action=self._queue.pop(0))

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path)}
