"""A random baseline: well-formed, harmless tool calls drawn with a seeded RNG, then submit.

It lists directories, views files, runs the test command or small shell
probes, and makes harmless edits (appending a comment to a file), so its
trajectories look like an agent's without being able to solve anything but
by accident. Seeded per episode: the same seed gives the same actions.
"""

from __future__ import annotations

import random
import re
from typing import Any

from .base import AgentAction, EpisodeStart

__all__ = ["RandomAgent"]

_PROBES = ["ls -la", "git status --short", "git log --oneline | head -5", "find . -name '*.py' | head -20",
           "wc -l $(git ls-files | head -20)", "grep -rn TODO . | head -5", "cat README* | head -30"]


class RandomAgent:
    name = "random"

    def __init__(self, max_actions: int = 8, seed: int | None = None) -> None:
        self.max_actions = max_actions
        self.base_seed = seed
        self._rng = random.Random(seed)
        self._left = 0
        self._files: list[str] = []
        self._test_cmd: str | None = None
        self._workdir = "."

    async def reset(self, start: EpisodeStart) -> None:
        seed = start.seed if self.base_seed is None else self.base_seed
        self._rng = random.Random(f"{seed}:{start.task_id}")
        self._left = self._rng.randint(2, self.max_actions)
        self._files = []
        match = re.search(r"tests run with: (.+)", start.instructions)
        self._test_cmd = match.group(1).strip() if match else None
        self._last_listing = True

    async def act(self, observation: str) -> AgentAction:
        if self._last_listing:
            self._files += [line.strip() for line in observation.splitlines()
                            if re.fullmatch(r"[\w./-]+\.(py|js|md|txt|toml|cfg)", line.strip())]
            self._last_listing = False
        if self._left <= 0:
            return AgentAction(action={"name": "submit", "arguments": {}})
        self._left -= 1
        choice = self._rng.choice(["list", "view", "probe", "test", "edit"])
        if choice == "list" or (choice in ("view", "edit") and not self._files):
            self._last_listing = True
            return AgentAction(action={"name": "bash", "arguments": {"command": "git ls-files | head -50"}})
        if choice == "view":
            path = self._rng.choice(self._files)
            start = self._rng.randint(1, 40)
            return AgentAction(action={"name": "view", "arguments": {"path": path, "start_line": start, "end_line": start + 30}})
        if choice == "test" and self._test_cmd:
            return AgentAction(action={"name": "bash", "arguments": {"command": f"{self._test_cmd} 2>&1 | tail -15", "timeout": 120}})
        if choice == "edit":
            path = self._rng.choice(self._files)
            mark = "#" if path.endswith((".py", ".toml", ".cfg")) else "//" if path.endswith(".js") else ""
            note = f"\n{mark} reviewed\n" if mark else "\n"
            return AgentAction(action={"name": "bash", "arguments": {"command": f"printf '%s' {note!r} >> {path}"}})
        return AgentAction(action={"name": "bash", "arguments": {"command": self._rng.choice(_PROBES)}})

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "max_actions": self.max_actions, "seed": self.base_seed}
