"""Validate tasks: the oracle must score 1 and the empty solution 0, through the real env."""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import anyio
from pydantic import BaseModel, Field

from ..envs.core import AsyncEnv, EnvConfig, ToolCall
from ..envs.errors import SandgymError
from ..envs.images import ImageBuilder
from ..envs.sandbox import DockerProvider
from ..envs.tasks import TaskBase

__all__ = ["TaskValidation", "ValidationReport", "validate_tasks", "run_calls"]

log = logging.getLogger(__name__)


class TaskValidation(BaseModel):
    task: str
    repo: str | None = None
    language: str | None = None
    oracle_score: float | None = None
    empty_score: float | None = None
    error: str | None = None
    oracle_details: dict = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.oracle_score == 1.0 and self.empty_score == 0.0


class ValidationReport(BaseModel):
    tasks: int
    oracle_pass: int
    empty_pass: int
    repos: int
    languages: list[str]
    failures: list[dict]
    results: list[TaskValidation] = Field(default_factory=list, exclude=True)


async def run_calls(env: AsyncEnv, task: TaskBase, calls: Sequence[ToolCall]) -> tuple[float, dict]:
    """Reset on ``task``, play ``calls`` (ending in submit); the final reward and info."""
    await env.reset(task)
    reward, done, info = 0.0, False, {}
    for call in calls:
        _, reward, terminated, truncated, info = await env.step(call)
        if terminated or truncated:
            done = True
            break
    if not done:
        _, reward, _, _, info = await env.step(ToolCall(name="submit"))
    return reward, info


def _test_list_problems(grade: dict) -> str | None:
    """With no fix, every FAIL_TO_PASS test must fail and every PASS_TO_PASS test pass."""
    details = grade.get("details", {})
    if "fail_to_pass" not in details:
        return None
    passing = [t for t, s in details["fail_to_pass"].items() if s in ("PASSED", "XFAIL")]
    failing = list(details.get("pass_to_pass_failed", {}))
    problems = []
    if passing:
        problems.append(f"FAIL_TO_PASS tests pass without the fix: {passing[:3]}")
    if failing:
        problems.append(f"PASS_TO_PASS tests fail without the fix: {failing[:3]}")
    return "; ".join(problems) or None


async def _validate_one(
    task: TaskBase, family: str, provider: DockerProvider, builder: ImageBuilder
) -> TaskValidation:
    result = TaskValidation(
        task=task.instance_id, repo=getattr(task, "repo", None), language=getattr(task, "language", None)
    )
    env = AsyncEnv(family, config=EnvConfig(max_steps=20, run_label="validate"), provider=provider, builder=builder)
    try:
        result.oracle_score, oracle_info = await run_calls(env, task, env.family.oracle(task))
        result.oracle_details = oracle_info.get("grade", {})
        result.empty_score, empty_info = await run_calls(env, task, [ToolCall(name="submit")])
        result.error = _test_list_problems(empty_info.get("grade", {}))
    except SandgymError as exc:
        result.error = str(exc)
    except Exception as exc:  # a broken task must not stop the others
        log.exception("validating %s", task.instance_id)
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        await env.aclose()
    return result


async def validate_tasks(
    tasks: Sequence[TaskBase],
    *,
    concurrency: int = 2,
    provider: DockerProvider | None = None,
    on_done: Callable[[TaskValidation], None] | None = None,
) -> ValidationReport:
    provider = provider or DockerProvider(run_label="validate")
    builder = ImageBuilder(provider.client())
    results: dict[str, TaskValidation] = {}
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(task: TaskBase) -> None:
        async with limiter:
            family = getattr(task, "family", "swe")
            res = await _validate_one(task, family, provider, builder)
        results[task.instance_id] = res
        if on_done:
            on_done(res)

    async with anyio.create_task_group() as tg:
        for task in tasks:
            tg.start_soon(one, task)
    ordered = [results[t.instance_id] for t in tasks]
    failures = []
    for r in ordered:
        if r.error:
            failures.append({"task": r.task, "reason": r.error})
        elif r.oracle_score != 1.0:
            failures.append({"task": r.task, "reason": f"oracle scored {r.oracle_score}"})
        elif r.empty_score != 0.0:
            failures.append({"task": r.task, "reason": f"empty solution scored {r.empty_score}"})
    return ValidationReport(
        tasks=len(ordered),
        oracle_pass=sum(r.oracle_score == 1.0 for r in ordered),
        empty_pass=sum(r.empty_score == 1.0 for r in ordered),
        repos=len({r.repo for r in ordered if r.repo}),
        languages=sorted({r.language for r in ordered if r.language}),
        failures=failures,
        results=ordered,
    )
