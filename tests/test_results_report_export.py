"""Results, report and export over a synthetic run written the way the harness writes one."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from statistics import NormalDist

import pytest
from rich.console import Console

from sandgym.harness.export import episode_messages, export_run, parquet_schema
from sandgym.harness.report import render_chart, render_report, results_table
from sandgym.harness.results import compute_results, pass_at_k, results_json, wilson_interval
from sandgym.harness.trajectory import StepRecord, Trajectory, episode_id, load_trajectories, write_atomic

RUN_ID = "run-test-1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "submit", "description": "Done.", "parameters": {"type": "object"}}},
]
FAMILY = {"t1": "swe", "t2": "swe", "t3": "data"}


def _step(i: int, action, *, content=None, format_error=None, obs=None) -> StepRecord:
    return StepRecord(
        index=i,
        action=action,
        content=content,
        format_error=format_error,
        observation=obs if obs is not None else f"observation {i}",
        started_at=1_700_000_000.0 + i,
        tokens_in=100,
        tokens_out=10,
        cost_usd=0.001,
    )


def _default_steps() -> list[StepRecord]:
    return [
        _step(1, {"name": "bash", "arguments": {"command": "ls"}, "id": "call_a"}, content="Let me look."),
        _step(2, {"name": "bash", "arguments": {"command": "pytest"}, "id": "call_a"}),  # repeated id
        _step(3, {"name": "submit", "arguments": {}}),  # no id
    ]


def _traj(agent, task, epoch, resolved, *, status="completed", termination="submit", steps=None, **extra) -> Trajectory:
    steps = _default_steps() if steps is None else steps
    return Trajectory(
        run_id=RUN_ID,
        episode_id=episode_id(agent, task, epoch),
        agent=agent,
        task_id=task,
        family=FAMILY[task],
        epoch=epoch,
        instructions=f"Fix the bug in {task}.",
        tools=TOOLS,
        steps=steps,
        status=status,
        termination=termination,
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        started_at=1_700_000_000.0,
        finished_at=1_700_000_000.0 + 30 * epoch,
        wall_s=30.0,
        tokens_in=sum(s.tokens_in for s in steps),
        tokens_out=sum(s.tokens_out for s in steps),
        cost_usd=sum(s.cost_usd for s in steps),
        **extra,
    )


def _records() -> list[Trajectory]:
    format_error_steps = [
        _step(1, "I think I should run ls", format_error="no tool call in the reply", obs="error: not a tool call"),
        _step(2, json.dumps({"name": "bash", "arguments": {"command": "ls"}}), obs="a.py\n[exit code 0]"),
        _step(3, {"name": "bash", "arguments": "{\"command\": \"cat a.py\"}", "id": "x1"}, obs="print(1)"),
        _step(4, {"name": "bash", "bogus": 1}, obs="malformed tool call: bogus: extra inputs"),
        _step(5, {"name": "submit", "arguments": {"message": "done"}, "id": "x2"}, obs="submitted"),
    ]
    return [
        # alpha: t1 resolved 1/3, t2 3/3, t3 0/3 with an agent error and an infra error that exhausted retries.
        _traj("alpha", "t1", 1, True),
        _traj("alpha", "t1", 2, False, steps=format_error_steps),
        _traj("alpha", "t1", 3, False, termination="max_steps"),
        _traj("alpha", "t2", 1, True),
        _traj("alpha", "t2", 2, True),
        _traj("alpha", "t2", 3, True),
        _traj("alpha", "t3", 1, False),
        _traj("alpha", "t3", 2, False, status="error", termination="agent_error", error="endpoint refused"),
        _traj(
            "alpha", "t3", 3, False, status="error", termination="infra_error", steps=[],
            error="engine gone", infra_attempts=["engine gone", "engine gone"],
        ),  # fmt: skip
        # beta: t2 epoch 3 interrupted, so t2 has 2 counted epochs and pass@k stops at k=2.
        _traj("beta", "t1", 1, False),
        _traj("beta", "t1", 2, True),
        _traj("beta", "t1", 3, False),
        _traj("beta", "t2", 1, False),
        _traj("beta", "t2", 2, False),
        _traj("beta", "t2", 3, False, status="interrupted", termination="interrupted", steps=_default_steps()[:1]),
        _traj("beta", "t3", 1, True),
        _traj("beta", "t3", 2, True),
        _traj("beta", "t3", 3, False),
        # solo: one epoch of one task: only pass@1.
        _traj("solo", "t1", 1, True),
    ]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / RUN_ID
    for t in _records():
        write_atomic(run / "trajectories" / f"{t.episode_id}.json", t.model_dump_json(indent=2))
    manifest = {
        "run_id": RUN_ID,
        "sandgym_version": "0.1.0",
        "created_at": 1_700_000_000.0,
        "agents": [{"name": "alpha"}, {"name": "beta"}, {"name": "solo"}],
        "tasks": ["t1", "t2", "t3"],
        "epochs": 3,
    }
    write_atomic(run / "manifest.json", json.dumps(manifest))
    return run


# --- statistics ------------------------------------------------------------------


def _wilson_reference(c: int, n: int) -> tuple[float, float]:
    """Wilson's interval written out from its textbook form, separately from the module's."""
    z = NormalDist().inv_cdf(0.975)
    p = c / n
    lo = (p + z**2 / (2 * n) - z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))) / (1 + z**2 / n)
    hi = (p + z**2 / (2 * n) + z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))) / (1 + z**2 / n)
    return lo, hi


@pytest.mark.parametrize(
    ("c", "n", "published"),
    [(0, 10, (0.0, 0.2775)), (10, 10, (0.7225, 1.0)), (5, 10, (0.2366, 0.7634)), (1, 3, (0.0615, 0.7923))],
)
def test_wilson_interval_matches_known_values(c, n, published):
    lo, hi = wilson_interval(c, n)
    ref_lo, ref_hi = _wilson_reference(c, n)
    assert lo == pytest.approx(max(ref_lo, 0.0), abs=1e-12)
    assert hi == pytest.approx(min(ref_hi, 1.0), abs=1e-12)
    assert (lo, hi) == pytest.approx(published, abs=1e-4)
    assert 0.0 <= lo <= c / n <= hi <= 1.0


def test_wilson_interval_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_pass_at_k_hand_worked():
    # n=3, c=1: pass@1 = 1 - C(2,1)/C(3,1) = 1/3; pass@2 = 1 - C(2,2)/C(3,2) = 2/3; pass@3 = 1.
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(3, 1, 3) == 1.0
    assert pass_at_k(3, 0, 2) == 0.0 and pass_at_k(3, 3, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


# --- results ---------------------------------------------------------------------


def test_results_per_agent(run_dir):
    results = compute_results(load_trajectories(run_dir))
    assert list(results.agents) == ["alpha", "beta", "solo"]
    assert results.run_ids == [RUN_ID] and results.families == ["data", "swe"]

    alpha = results.agents["alpha"]
    assert (alpha.episodes, alpha.resolved, alpha.tasks, alpha.epochs) == (9, 4, 3, 3)
    assert alpha.rate == pytest.approx(4 / 9)
    assert alpha.ci95 == pytest.approx(wilson_interval(4, 9))
    # per task c/n: t1 1/3, t2 3/3, t3 0/3
    assert alpha.pass_at_k == pytest.approx({"1": (1 / 3 + 1 + 0) / 3, "2": (2 / 3 + 1 + 0) / 3, "3": (1 + 1 + 0) / 3})
    assert alpha.errors == 2 and alpha.infra_errors == 1 and alpha.infra_retries == 2
    assert alpha.status_counts == {"completed": 7, "error": 2}
    assert alpha.termination_counts == {"agent_error": 1, "infra_error": 1, "max_steps": 1, "submit": 6}
    assert alpha.format_errors == 1
    steps = [3, 5, 3, 3, 3, 3, 3, 3, 0]
    assert alpha.mean_steps == pytest.approx(sum(steps) / 9)
    assert alpha.total_tokens == sum(s * 110 for s in steps)
    assert alpha.mean_tokens == pytest.approx(alpha.total_tokens / 9)
    assert alpha.total_cost_usd == pytest.approx(sum(steps) * 0.001)
    assert alpha.mean_wall_s == pytest.approx(30.0)

    beta = results.agents["beta"]
    assert (beta.episodes, beta.resolved, beta.interrupted) == (8, 3, 1)  # the interrupted one is left out
    assert beta.status_counts == {"completed": 8, "interrupted": 1}
    assert list(beta.pass_at_k) == ["1", "2"]  # t2 has only two counted epochs
    assert beta.pass_at_k["1"] == pytest.approx((1 / 3 + 0 / 2 + 2 / 3) / 3)
    assert beta.pass_at_k["2"] == pytest.approx((2 / 3 + 0 + 1) / 3)

    solo = results.agents["solo"]
    assert solo.pass_at_k == {"1": 1.0} and solo.rate == 1.0 and solo.ci95[1] == 1.0


def test_results_by_family_and_task(run_dir):
    results = compute_results(load_trajectories(run_dir))
    swe = results.by_family["alpha"]["swe"]
    assert (swe.family, swe.episodes, swe.resolved) == ("swe", 6, 4)
    assert swe.pass_at_k == pytest.approx({"1": (1 / 3 + 1) / 2, "2": (2 / 3 + 1) / 2, "3": 1.0})
    assert results.by_family["alpha"]["data"].rate == 0.0
    assert list(results.by_family["solo"]) == ["swe"]
    t2 = results.by_task["t2"]
    assert t2.family == "swe" and t2.episodes == {"alpha": 3, "beta": 2} and t2.resolved == {"alpha": 3, "beta": 0}


def test_results_keep_the_redo_over_an_interrupted_copy():
    first = _traj("alpha", "t1", 1, False, status="interrupted", termination="interrupted")
    redo = _traj("alpha", "t1", 1, True).model_copy(update={"finished_at": first.finished_at + 100})
    for order in ([first, redo], [redo, first]):
        r = compute_results(order).agents["alpha"]
        assert (r.episodes, r.resolved, r.interrupted) == (1, 1, 0)


def test_results_of_only_interrupted_episodes():
    r = compute_results([_traj("alpha", "t1", 1, False, status="interrupted", termination="interrupted")]).agents["alpha"]
    assert r.episodes == 0 and r.rate is None and r.pass_at_k == {} and r.ci95 == (0.0, 1.0)


def test_results_json_shape(run_dir):
    data = json.loads(json.dumps(results_json(compute_results(load_trajectories(run_dir)))))
    assert list(data) == ["agents"]
    assert set(data["agents"]) == {"alpha", "beta", "solo"}
    for agent in data["agents"].values():
        assert {"episodes", "resolved", "rate", "ci95", "pass_at_k"} <= set(agent)
        assert isinstance(agent["episodes"], int) and isinstance(agent["resolved"], int)
        assert isinstance(agent["rate"], float)
        assert isinstance(agent["ci95"], list) and len(agent["ci95"]) == 2
        assert agent["ci95"][0] <= agent["rate"] <= agent["ci95"][1]
        assert "1" in agent["pass_at_k"] and all(isinstance(v, float) for v in agent["pass_at_k"].values())
        assert all(isinstance(k, str) and k.isdigit() for k in agent["pass_at_k"])
    assert set(data["agents"]["alpha"]["pass_at_k"]) == {"1", "2", "3"}
    assert set(data["agents"]["solo"]["pass_at_k"]) == {"1"}
    assert set(data["agents"]["alpha"]["families"]) == {"swe", "data"}
    assert data["agents"]["alpha"]["families"]["swe"]["resolved"] == 4


# --- report ----------------------------------------------------------------------


def _check_png(path: Path, min_bytes: int = 10_000) -> None:
    from PIL import Image

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > min_bytes
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= 600 and image.height >= 400
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is not None and len(colours) > 50  # bars, text and anti-aliasing, not a blank canvas


def test_render_report(run_dir):
    md, html_path, png = render_report(run_dir)
    assert (md, html_path, png) == (run_dir / "report.md", run_dir / "report.html", run_dir / "resolve_rate.png")
    _check_png(png)

    text = md.read_text()
    for heading in ("## Run", "## Per agent", "## Per agent and family", "## Per task", "## Episodes by status"):
        assert heading in text
    assert "| agent | episodes | resolved | rate | 95% CI | pass@1 | pass@2 | pass@3 |" in text
    assert re.search(r"\| alpha \| 9 \| 4 \| 44\.4% \| \d+\.\d–\d+\.\d% \| 44\.4% \| 55\.6% \| 66\.7% \|", text)
    assert re.search(r"\| beta \| 8 \| 3 \| 37\.5% \| .* \| 33\.3% \| 55\.6% \| – \|", text)
    assert re.search(r"\| alpha \| swe \| 6 \| 4 \|", text)
    assert re.search(r"\| t2 \| swe \| 3/3 \| 0/2 \| – \| 1/2 \|", text)
    assert "| sandgym_version | 0.1.0 |" in text and "| agents | alpha, beta, solo |" in text
    assert "2023-11-14" in text  # created_at shown as a date
    assert "![Resolve rate per agent](resolve_rate.png)" in text

    page = html_path.read_text()
    match = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert match and base64.b64decode(match.group(1)) == png.read_bytes()
    assert "<table>" in page and "<td>alpha</td>" in page and "Per agent and family" in page
    assert "<td>t2</td>" in page


def test_render_report_without_manifest_or_episodes(tmp_path):
    md, html_path, png = render_report(tmp_path)
    _check_png(png, min_bytes=5_000)
    assert "## Run" not in md.read_text() and "(none)" in md.read_text()
    assert html_path.is_file()


@pytest.mark.parametrize("count", [1, 10])
def test_chart_for_one_to_ten_agents(tmp_path, count):
    names = [f"agent-{i}" if i % 3 else f"a-long-agent-name-number-{i}" for i in range(count)]
    records = []
    for i, name in enumerate(names):
        for e in range(1, 5):
            records.append(_traj("alpha", "t1", e, e <= i % 5).model_copy(update={"agent": name, "episode_id": f"{name}-{e}"}))
    png = render_chart(compute_results(records), tmp_path / f"chart{count}.png")
    _check_png(png)


def test_results_table_renders(run_dir):
    table = results_table(compute_results(load_trajectories(run_dir)))
    assert table.row_count == 3
    console = Console(record=True, width=220)
    console.print(table)
    out = console.export_text()
    assert "alpha" in out and "44.4%" in out and "pass@3" in out


# --- export ----------------------------------------------------------------------

COLUMNS = [
    "run_id", "episode_id", "agent", "task_id", "family", "epoch", "reward", "resolved", "status", "termination",
    "num_steps", "tokens_in", "tokens_out", "cost_usd", "wall_s", "schema_version", "error", "messages", "tools",
]  # fmt: skip


def _check_messages(messages: list[dict]) -> None:
    assert messages[0]["role"] == "user" and messages[0]["content"]
    ids: set[str] = set()
    for i, m in enumerate(messages):
        assert m["role"] in ("user", "assistant", "tool")
        if m["role"] == "tool":
            prev = messages[i - 1]
            assert prev["role"] == "assistant" and prev.get("tool_calls")
            assert m["tool_call_id"] == prev["tool_calls"][0]["id"]
        if m.get("tool_calls"):
            for call in m["tool_calls"]:
                assert call["type"] == "function" and call["id"] not in ids
                ids.add(call["id"])
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
            assert messages[i + 1]["role"] == "tool"
        if m["role"] == "assistant" and not m.get("tool_calls"):
            assert isinstance(m["content"], str) and messages[i + 1]["role"] == "user"


def test_messages_from_tool_calls_and_format_errors():
    t = next(r for r in _records() if r.episode_id == episode_id("alpha", "t1", 2))
    messages = episode_messages(t)
    _check_messages(messages)
    assert [m["role"] for m in messages] == ["user"] + ["assistant", "user"] + ["assistant", "tool"] * 2 + [
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert messages[1] == {"role": "assistant", "content": "I think I should run ls"}
    assert messages[2] == {"role": "user", "content": "error: not a tool call"}
    assert messages[3]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}  # JSON text
    assert messages[3]["tool_calls"][0]["id"] == "call_2"
    assert messages[5]["tool_calls"][0]["id"] == "x1"
    assert json.loads(messages[5]["tool_calls"][0]["function"]["arguments"]) == {"command": "cat a.py"}
    assert json.loads(messages[7]["content"]) == {"name": "bash", "bogus": 1}  # not a valid call: raw text
    assert messages[-1] == {"role": "tool", "tool_call_id": "x2", "content": "submitted"}

    default = episode_messages(_traj("alpha", "t1", 1, True))
    _check_messages(default)
    assert [c["id"] for m in default for c in m.get("tool_calls", [])] == ["call_a", "call_2", "call_3"]
    assert default[1]["content"] == "Let me look." and default[3]["content"] is None


def test_export_jsonl(run_dir, tmp_path):
    out = tmp_path / "out" / "episodes.jsonl"
    assert export_run(run_dir, "jsonl", out) == 19
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 19
    for row in rows:
        assert list(row) == COLUMNS
        _check_messages(row["messages"])
        assert row["tools"] == TOOLS and isinstance(row["reward"], float) and isinstance(row["resolved"], bool)
        assert len([m for m in row["messages"] if m["role"] == "assistant"]) == row["num_steps"]
    assert {r["status"] for r in rows} == {"completed", "error", "interrupted"}
    errored = next(r for r in rows if r["termination"] == "infra_error")
    assert errored["error"] == "engine gone" and errored["messages"] == [{"role": "user", "content": "Fix the bug in t3."}]


def _strip_nulls(value):
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def test_export_parquet(run_dir, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "episodes.parquet"
    assert export_run(run_dir, "parquet", out) == 19
    table = pq.read_table(out)
    assert table.num_rows == 19 and table.column_names == COLUMNS
    assert table.schema.equals(parquet_schema())
    rows = table.to_pylist()
    export_run(run_dir, "jsonl", tmp_path / "e.jsonl")
    expected = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    for got, want in zip(rows, expected):
        assert json.loads(got["tools"]) == want["tools"]
        _check_messages(got["messages"])
        # the same conversation, the absent keys as nulls (an assistant tool call without text keeps content=None)
        assert _strip_nulls(got["messages"]) == _strip_nulls(want["messages"])
        for column in COLUMNS[:-2]:
            assert got[column] == want[column]


def test_export_parquet_loads_with_datasets(run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local file: nothing to fetch
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "episodes.parquet"
    export_run(run_dir, "parquet", out)
    ds = datasets.load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == 19 and ds.column_names == COLUMNS
    first = ds[0]
    _check_messages(first["messages"])
    assert json.loads(first["tools"]) == TOOLS


def test_export_unknown_format(run_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown export format"):
        export_run(run_dir, "csv", tmp_path / "x.csv")  # type: ignore[arg-type]
