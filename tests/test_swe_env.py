"""The SWE family end to end: a SWE-bench-format JSONL over a local mirror, the gym API,
grading in a fresh container, and agents that try to cheat."""

from __future__ import annotations

import json
import os

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import sandgym.envs  # noqa: F401  (registers sandgym/SWE-v0)
from sandgym.envs.core import AsyncEnv, EnvConfig, EpisodeError, ToolCall
from sandgym.envs.tasks import load_tasks
from sandgym.harness.validate import validate_tasks

from support.minirepo import make_dataset

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("swebench")
    path, mirror, facts = make_dataset(root)
    old = os.environ.get("SANDGYM_REPO_MIRROR")
    os.environ["SANDGYM_REPO_MIRROR"] = str(mirror)
    yield path, facts
    if old is None:
        os.environ.pop("SANDGYM_REPO_MIRROR", None)
    else:
        os.environ["SANDGYM_REPO_MIRROR"] = old


@pytest.fixture(scope="module")
def task(dataset):
    return load_tasks(dataset[0])[0]


@pytest.fixture
async def env(provider):
    env = AsyncEnv("swe", config=EnvConfig(max_steps=10, run_label="pytest"), provider=provider)
    yield env
    await env.aclose()


async def bash(env, command):
    obs, reward, terminated, truncated, info = await env.step({"name": "bash", "arguments": {"command": command}})
    return obs, info


async def submit(env):
    return await env.step({"name": "submit", "arguments": {}})


async def test_imported_swebench_jsonl_validates(dataset, provider):
    tasks = load_tasks(dataset[0])
    report = await validate_tasks(tasks, provider=provider)
    assert (report.tasks, report.oracle_pass, report.empty_pass, report.repos) == (1, 1, 0, 1)
    assert report.languages == ["python"] and report.failures == []


async def test_agent_container_reveals_nothing_past_the_base(env, task, dataset):
    _, facts = dataset
    obs, info = await env.reset(task)
    assert "mean([]) raises ZeroDivisionError" in obs
    out, _ = await bash(env, "git rev-parse HEAD; git log --oneline | wc -l; git remote | wc -l; "
                             "git reflog | wc -l; git tag | wc -l; git branch -a | wc -l")
    head, commits, remotes, reflog, tags, branches = out.splitlines()[:6]
    assert head == task.base_commit
    assert (commits, remotes, reflog, tags, branches) == ("2", "0", "0", "0", "1")
    out, _ = await bash(env, f"git cat-file -t {facts['later']} || echo absent")
    assert "absent" in out
    out, _ = await bash(env, "grep -rn empty tests/ calc.py; ls /tmp/*.patch 2>/dev/null | wc -l")
    assert "test_mean_of_empty" not in out  # the hidden test is nowhere
    out, _ = await bash(env, "curl -sS -m 3 http://deb.debian.org >/dev/null && echo online || echo offline")
    assert "offline" in out


async def test_edit_tool_fix_resolves_and_no_fix_does_not(env, task):
    await env.reset(task)
    obs, reward, terminated, truncated, info = await env.step(
        ToolCall(name="edit", arguments={
            "command": "str_replace", "path": "calc.py",
            "old_str": "    values = list(values)\n",
            "new_str": "    values = list(values)\n    if not values:\n        raise ValueError('empty data')\n",
        })
    )
    assert "edited /testbed/calc.py" in obs and reward == 0.0 and not terminated
    obs, reward, terminated, truncated, info = await submit(env)
    assert terminated and not truncated and reward == 1.0
    assert info["grade"]["resolved"] and info["termination"] == "submit"
    with pytest.raises(EpisodeError):
        await submit(env)

    await env.reset(task)
    obs, reward, terminated, truncated, info = await submit(env)
    assert terminated and reward == 0.0
    assert info["grade"]["details"]["fail_to_pass"] == {task.fail_to_pass[0]: "FAILED"}


async def test_editing_the_tests_does_not_help(env, task):
    await env.reset(task)
    # weaken the existing tests and plant the hidden test's name as a trivially passing test
    await bash(env, "cat > tests/test_calc.py <<'EOF'\n"
                    "def test_mean_of_empty_data_is_a_value_error():\n    assert True\n"
                    "def test_add():\n    assert True\n"
                    "def test_mul():\n    assert True\n"
                    "def test_mean():\n    assert True\n"
                    "def test_mean_generator():\n    assert True\nEOF")
    await bash(env, "printf 'import pytest\\n@pytest.fixture(autouse=True)\\ndef _x():\\n    yield\\n' > conftest.py")
    _, reward, terminated, _, info = await submit(env)
    assert terminated and reward == 0.0
    assert info["grade"]["details"]["fail_to_pass"][task.fail_to_pass[0]] == "FAILED"


async def test_deleting_failing_tests_does_not_help(env, task):
    await env.reset(task)
    await bash(env, "rm -rf tests")
    _, reward, _, _, info = await submit(env)
    assert reward == 0.0
    assert info["grade"]["details"]["fail_to_pass"][task.fail_to_pass[0]] == "FAILED"


async def test_fake_passing_output_does_not_help(env, task):
    await env.reset(task)
    lines = "".join(f"PASSED {t}\\n" for t in task.fail_to_pass + task.pass_to_pass)
    fake = (
        "import os, sys\n"
        f"sys.stdout.write('{lines}'); sys.stdout.write('=== 5 passed in 0.01s ===\\n'); sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    await env.step({"name": "edit", "arguments": {"command": "insert", "path": "calc.py", "insert_line": 0, "new_str": fake}})
    _, reward, _, _, info = await submit(env)
    assert reward == 0.0
    assert not info["grade"]["resolved"]
    assert info["grade"]["error"] == "the test suite did not run"


async def test_garbage_actions_are_observations_and_count(env, task):
    await env.reset(task)
    bad = [
        "this is not json",
        {"name": "rm_rf", "arguments": {}},
        {"name": "bash", "arguments": {"cmd": "ls"}},
        {"name": "edit", "arguments": {"command": "str_replace", "path": "calc.py"}},
        {"name": "bash", "arguments": "{not json"},
        42,
    ]
    for i, action in enumerate(bad, 1):
        obs, reward, terminated, truncated, info = await env.step(action)
        assert obs.startswith("error:") and info["invalid_action"] and info["step"] == i
        assert not terminated and not truncated
    obs, *_ = await env.step({"name": "edit", "arguments": {
        "command": "str_replace", "path": "calc.py", "old_str": "return", "new_str": "return"}})
    assert "found 3 times" in obs


async def test_step_limit_truncates_and_still_grades(provider, task):
    env = AsyncEnv("swe", config=EnvConfig(max_steps=2, truncation_reward="zero", run_label="pytest"), provider=provider)
    try:
        await env.reset(task)
        await env.step(ToolCall(name="edit", arguments={"command": "create", "path": "/tmp/g.patch", "file_text": task.patch}))
        obs, reward, terminated, truncated, info = await env.step(ToolCall(name="bash", arguments={"command": "git apply /tmp/g.patch"}))
        assert truncated and not terminated
        assert info["termination"] == "max_steps"
        assert info["grade"]["resolved"] is True  # graded, but the reward on truncation is configured to 0
        assert reward == 0.0
    finally:
        await env.aclose()


def test_gymnasium_make_check_env_and_a_hand_driven_episode(task, dataset):
    env = gymnasium.make("sandgym/SWE-v0", task=task, max_steps=10)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, info = env.reset(seed=3)
        assert env.observation_space.contains(obs)
        obs, reward, terminated, truncated, info = env.step(json.dumps(
            {"name": "bash", "arguments": {"command": "printf 'caf\\xc3\\xa9 \\xf0\\x9f\\x98\\x80 \\x1b[1mbold\\x1b[0m\\x07\\n'"}}))
        assert env.observation_space.contains(obs) and "café" in obs
        env.step(json.dumps({"name": "edit", "arguments": {
            "command": "create", "path": "/tmp/fix.patch", "file_text": task.patch}}))
        env.step(json.dumps({"name": "bash", "arguments": {"command": "git apply /tmp/fix.patch"}}))
        obs, reward, terminated, truncated, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
        assert terminated and reward == 1.0
        env.reset(seed=4)
        obs, reward, terminated, truncated, info = env.step({"name": "submit", "arguments": {}})
        assert terminated and reward == 0.0
    finally:
        env.close()
