"""Harness overhead: the runner against a plain anyio loop doing the same episodes, in one run.

    python benchmarks/harness.py [--episodes 1000] [--concurrency 32] [--steps 5] [--step-ms 2]

Both drive the same trivial in-process environment (no containers: each
step just waits ``--step-ms``, like a fast command) and the same scripted
agent. The runner adds what a real run has: a trajectory record saved after
every step and atomically (fsync'd) at the end, the manifest, events and
results. Last line: one JSON object with episodes_per_s,
baseline_episodes_per_s, ratio and peak_rss_mb.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import anyio

from sandgym.agents import AgentAction
from sandgym.envs.tasks import TaskBase
from sandgym.harness.runner import RunConfig, Runner


class TrivialFamily:
    name = "trivial"


class TrivialEnv:
    """Terminates with reward 1 after ``steps`` steps; each step waits ``step_s``."""

    family = TrivialFamily()

    def __init__(self, steps: int, step_s: float) -> None:
        self.steps, self.step_s, self.t = steps, step_s, 0

    def tool_schemas(self) -> list[dict]:
        return [{"type": "function", "function": {"name": "bash", "parameters": {}}}]

    async def reset(self, task, seed=None):
        self.t = 0
        return f"solve {task.instance_id}", {"task_id": task.instance_id}

    async def step(self, action):
        await anyio.sleep(self.step_s)
        self.t += 1
        done = self.t >= self.steps
        info = {"exit_code": 0}
        if done:
            info.update({"grade": {"score": 1.0, "resolved": True}, "termination": "submit"})
        return f"output of step {self.t}", 1.0 if done else 0.0, done, False, info

    async def finish(self, reason):
        return 0.0, {"termination": reason}

    async def aclose(self):
        pass


class ScriptedAgent:
    name = "scripted"

    async def reset(self, start) -> None:
        self.n = 0

    async def act(self, observation: str) -> AgentAction:
        self.n += 1
        return AgentAction(action={"name": "bash", "arguments": {"command": f"echo {self.n}"}})

    def config(self) -> dict:
        return {"name": self.name}


async def baseline(tasks, epochs: int, concurrency: int, steps: int, step_s: float) -> None:
    limiter = anyio.CapacityLimiter(concurrency)

    async def episode(task):
        async with limiter:
            env, agent = TrivialEnv(steps, step_s), ScriptedAgent()
            obs, _ = await env.reset(task)
            await agent.reset(None)
            done = False
            while not done:
                action = await agent.act(obs)
                obs, _, terminated, truncated, _ = await env.step(action.action)
                done = terminated or truncated

    async with anyio.create_task_group() as tg:
        for task in tasks:
            for _ in range(epochs):
                tg.start_soon(episode, task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=2.0)
    args = parser.parse_args()
    epochs = 10
    tasks = [TaskBase(instance_id=f"task-{i}", problem_statement="x") for i in range(max(1, args.episodes // epochs))]
    n = len(tasks) * epochs
    step_s = args.step_ms / 1000

    start = time.perf_counter()
    anyio.run(baseline, tasks, epochs, args.concurrency, args.steps, step_s)
    base_s = time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="sandgym-bench-") as tmp:
        config = RunConfig(tasks="trivial", agents=["scripted"], epochs=epochs, concurrency=args.concurrency,
                           max_steps=args.steps + 1)
        runner = Runner(config, tasks, Path(tmp) / "run", env_factory=lambda task: TrivialEnv(args.steps, step_s),
                        agent_factory=lambda spec: ScriptedAgent())
        start = time.perf_counter()
        anyio.run(runner.run)
        harness_s = time.perf_counter() - start
        written = len(list((Path(tmp) / "run" / "trajectories").glob("*.json")))
        assert written == n, f"{written} records for {n} episodes"

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "episodes": n,
        "episodes_per_s": round(n / harness_s, 1),
        "baseline_episodes_per_s": round(n / base_s, 1),
        "ratio": round(base_s / harness_s, 3),
        "peak_rss_mb": round(peak_mb, 1),
    }
    print(f"{n} episodes x {args.steps} steps of {args.step_ms:g} ms at concurrency {args.concurrency}")
    print(f"plain anyio loop: {base_s:.2f}s ({result['baseline_episodes_per_s']} episodes/s)")
    print(f"sandgym runner:   {harness_s:.2f}s ({result['episodes_per_s']} episodes/s, "
          f"{result['ratio']:.2f}x the plain loop; target >= 0.5), peak RSS {result['peak_rss_mb']} MB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
