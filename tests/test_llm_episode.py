"""The llm agent solves a task through the real runner, a real container and a scripted
OpenAI-compatible server, despite a 429 burst, a 500 and a malformed tool call."""

from __future__ import annotations

import json

import anyio
import pytest

from sandgym.envs.tasks import load_tasks
from sandgym.harness.results import compute_results
from sandgym.harness.runner import RunConfig, Runner
from sandgym.harness.trajectory import load_trajectories

from support.minirepo import make_dataset
from support.openai_server import ScriptedServer, error, tool_reply

pytestmark = [pytest.mark.docker]

FIX = {
    "command": "str_replace",
    "path": "calc.py",
    "old_str": "    values = list(values)\n",
    "new_str": "    values = list(values)\n    if not values:\n        raise ValueError('mean() of empty data')\n",
}
SECRET = "sk-test-this-key-must-never-be-written-anywhere"


def test_llm_agent_solves_a_scripted_task_through_the_harness(tmp_path, monkeypatch, provider):
    path, mirror, _ = make_dataset(tmp_path / "data")
    monkeypatch.setenv("SANDGYM_REPO_MIRROR", str(mirror))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    tasks = load_tasks(path)
    script = [
        tool_reply("bash", {"command": "python3 -m pytest -q 2>&1 | tail -3"}, usage=(100, 20)),
        error(429, retry_after=1),
        error(429, retry_after=1),
        error(500),
        tool_reply("edit", '{"command": "str_replace", "path": "calc.py", "old_str": ', usage=(150, 30)),
        tool_reply("edit", FIX, usage=(200, 40)),
        tool_reply("submit", {}, usage=(250, 5)),
    ]
    run = tmp_path / "run"
    with ScriptedServer(script) as server:
        config = RunConfig(
            tasks=str(path), agents=["llm"], max_steps=10,
            agent_options={"llm": {"base_url": server.base_url, "model": "scripted-model", "backoff_base": 0.05,
                                   "backoff_max": 0.2, "price_in_per_mtok": 2.0, "price_out_per_mtok": 8.0}},
        )
        anyio.run(Runner(config, tasks, run, provider=provider).run)
        requests = server.requests
    [traj] = load_trajectories(run)
    assert traj.status == "completed" and traj.termination == "submit"
    assert traj.resolved and traj.reward == 1.0
    assert [s.action["name"] if isinstance(s.action, dict) else None for s in traj.steps] == ["bash", "edit", "edit", "submit"]
    # the 429 burst and the 500 were retried inside the second step and recorded there
    retries = [e for e in traj.steps[1].events if e["type"] == "retry"]
    assert [e["status"] for e in retries] == [429, 429, 500]
    assert retries[0]["wait_s"] >= 1.0  # Retry-After honoured
    # the malformed call is a format error whose error observation went back to the model
    assert traj.steps[1].format_error and traj.steps[1].observation.startswith("error:")
    assert traj.steps[1].info["invalid_action"]
    last_messages = requests[-1].body["messages"]
    assert any(m["role"] == "tool" and m["content"].startswith("error:") for m in last_messages)
    assert traj.tokens_in == 700 and traj.tokens_out == 95
    assert traj.cost_usd == pytest.approx((700 * 2.0 + 95 * 8.0) / 1e6)
    assert compute_results([traj]).agents["llm"].resolved == 1
    # the key went over the wire, and nowhere else
    assert requests[0].headers["authorization"] == f"Bearer {SECRET}"
    for file in [run / "manifest.json", run / "results.json", *sorted((run / "trajectories").glob("*.json"))]:
        assert SECRET not in file.read_text(), file
    assert json.loads((run / "manifest.json").read_text())["agents"]["llm"]["model"] == "scripted-model"


def test_a_stalled_endpoint_cannot_outlive_the_episode_time_limit(tmp_path, monkeypatch, provider):
    from support.openai_server import slow

    path, mirror, _ = make_dataset(tmp_path / "data")
    monkeypatch.setenv("SANDGYM_REPO_MIRROR", str(mirror))
    tasks = load_tasks(path)
    run = tmp_path / "run"
    with ScriptedServer([tool_reply("bash", {"command": "true"}), slow(30, tool_reply("submit", {}))]) as server:
        config = RunConfig(tasks=str(path), agents=["llm"], max_time=6,
                           agent_options={"llm": {"base_url": server.base_url, "request_timeout": 60}})
        anyio.run(Runner(config, tasks, run, provider=provider).run)
    [traj] = load_trajectories(run)
    assert traj.status == "completed" and traj.termination == "max_time"
    assert traj.wall_s < 20 and not traj.resolved and traj.grade is not None


def test_an_endpoint_that_gives_up_is_an_agent_error_graded_and_not_retried(tmp_path, monkeypatch, provider):
    path, mirror, _ = make_dataset(tmp_path / "data")
    monkeypatch.setenv("SANDGYM_REPO_MIRROR", str(mirror))
    tasks = load_tasks(path)
    run = tmp_path / "run"
    script = [tool_reply("edit", FIX), error(500), error(500), error(500)]
    with ScriptedServer(script) as server:
        config = RunConfig(tasks=str(path), agents=["llm"], infra_retries=2, agent_options={"llm": {
            "base_url": server.base_url, "max_retries": 2, "backoff_base": 0.01, "backoff_max": 0.02}})
        anyio.run(Runner(config, tasks, run, provider=provider).run)
        assert len(server.requests) == 4  # never retried as an episode: one run of the script
    [traj] = load_trajectories(run)
    assert traj.status == "error" and traj.termination == "agent_error"
    assert "after 3 request(s)" in traj.error and "gave up after 2 retries" in traj.error
    assert traj.infra_attempts == []
    assert traj.resolved  # the fix made before the endpoint died is still graded
