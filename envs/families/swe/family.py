"""The SWE family: repository tasks in SWE-bench format.

Images come in two layers: a per-repository *environment* image (Debian
packages the tests need) keyed by a hash of its install recipe, so tasks of
one repository share it; and a per-task image that adds the clean checkout
at the base commit in /testbed and runs the install commands.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Callable

from ...core import Family, Grade, ToolCall
from ...errors import SandgymError
from ...images import ImageBuilder
from ...sandbox import DockerProvider, Sandbox, SandboxConfig
from ...tasks import SWETask, TaskBase
from .grading import WORKDIR, agent_diff, grade_diff
from .repos import testbed_tar

__all__ = ["SWEFamily", "env_dockerfile", "task_dockerfile"]


def env_dockerfile(packages: list[str]) -> str:
    lines = ["ARG BASE", "FROM ${BASE}"]
    if packages:
        pkgs = " ".join(shlex.quote(p) for p in sorted(set(packages)))
        lines.append(
            "RUN set -eux; apt-get update; apt-get install -y --no-install-recommends "
            f"{pkgs}; apt-get clean; rm -rf /var/lib/apt/lists/*"
        )
    return "\n".join(lines) + "\n"


def task_dockerfile(install: list[str]) -> str:
    lines = [
        "ARG BASE",
        "FROM ${BASE}",
        "ADD testbed.tar /",
        "WORKDIR /testbed",
        "RUN git config --system --add safe.directory /testbed && git status --short >/dev/null",
    ]
    for command in install:
        lines.append(f"RUN {command}")
    return "\n".join(lines) + "\n"


class SWEFamily(Family):
    name = "swe"
    workdir = WORKDIR

    def sandbox_config(self, task: TaskBase) -> SandboxConfig:
        return SandboxConfig(workdir=WORKDIR, memory="4g", cpus=2.0)

    @staticmethod
    def _config(task: TaskBase):
        if not isinstance(task, SWETask):
            raise SandgymError(f"{task.instance_id}: not an SWE task")
        if task.install_config is None:
            raise SandgymError(
                f"{task.instance_id}: no install_config (give the record one, or a repos/<name>/repo.toml beside it)"
            )
        return task, task.install_config

    def image(self, task: TaskBase, builder: ImageBuilder, on_event: Callable[[str, str], None] | None = None) -> str:
        task, config = self._config(task)
        base = builder.build(config.base_image, on_event=on_event)
        repo_slug = task.repo.replace("/", "__").lower()
        env_file = env_dockerfile(config.packages)
        env = builder.build_generated(
            f"sandgym/swe-env-{repo_slug}",
            env_file,
            parent=base,
            key=json.dumps({"packages": sorted(config.packages)}),
            labels={"sandgym.repo": task.repo},
            on_event=on_event,
        )
        key = json.dumps({"repo": task.repo, "commit": task.base_commit, "install": config.install})
        return builder.build_generated(
            f"sandgym/swe-task-{hashlib.sha256(task.instance_id.encode()).hexdigest()[:8]}",
            task_dockerfile(config.install),
            parent=env,
            key=key,
            files=lambda: {"testbed.tar": testbed_tar(task)},
            labels={"sandgym.repo": task.repo, "sandgym.task": task.instance_id[:200]},
            on_event=on_event,
        )

    def instructions(self, task: TaskBase) -> str:
        task, config = self._config(task)
        return (
            f"You are working in the repository {task.repo}, checked out at {WORKDIR}.\n"
            "Resolve the issue below by changing the code (not the tests). Run shell commands with the "
            "`bash` tool, look at files with `view`, change them with `edit`, and call `submit` when done.\n"
            f"The project's tests run with: {config.test_cmd}\n\n"
            f"<issue>\n{task.problem_statement.strip()}\n</issue>\n"
        )

    async def grade(self, task: TaskBase, sandbox: Sandbox, provider: DockerProvider, image: str) -> Grade:
        task, _ = self._config(task)
        diff = await agent_diff(sandbox)
        return await grade_diff(task, diff, provider, image)

    def oracle(self, task: TaskBase) -> list[ToolCall]:
        task, _ = self._config(task)
        return [
            ToolCall(name="edit", arguments={"command": "create", "path": "/tmp/gold.patch", "file_text": task.patch}),
            ToolCall(name="bash", arguments={"command": "git apply --verbose /tmp/gold.patch && rm /tmp/gold.patch"}),
            ToolCall(name="submit", arguments={}),
        ]
