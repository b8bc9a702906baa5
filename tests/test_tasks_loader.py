"""Task files: SWE-bench / SWE-rebench records as published, and clear errors for bad ones."""

from __future__ import annotations

import json

import pytest

from sandgym.envs.tasks import SWETask, TaskLoadError, load_tasks, parse_task

RECORD = {
    "instance_id": "octo__lib-7",
    "repo": "octo/lib",
    "base_commit": "a" * 40,
    "patch": "diff --git a/x b/x\n",
    "test_patch": "diff --git a/t b/t\n",
    "problem_statement": "it breaks",
    "hints_text": "",
    "version": "1.2",
    "environment_setup_commit": "b" * 40,
    "created_at": "2024-01-01T00:00:00Z",
    "FAIL_TO_PASS": json.dumps(["t.py::test_a"]),
    "PASS_TO_PASS": json.dumps(["t.py::test_b", "t.py::test_c"]),
}


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_swebench_record_as_published(tmp_path):
    tasks = load_tasks(write_jsonl(tmp_path / "d.jsonl", [RECORD]))
    task = tasks[0]
    assert isinstance(task, SWETask) and task.family == "swe"
    assert task.fail_to_pass == ["t.py::test_a"] and task.pass_to_pass == ["t.py::test_b", "t.py::test_c"]
    assert task.version == "1.2" and task.install_config is None
    assert task.source.endswith("d.jsonl:1")
    back = task.to_swebench()
    assert json.loads(back["FAIL_TO_PASS"]) == ["t.py::test_a"]
    assert back["environment_setup_commit"] == "b" * 40


def test_swerebench_install_config_and_extra_fields(tmp_path):
    record = {**RECORD, "install_config": {"install": "pip install -e .", "test_cmd": ["cd src", "pytest -rA"],
                                           "log_parser": "pytest", "python": "3.11"},
              "meta": {"llm_score": 3}, "license_name": "MIT"}
    task = load_tasks(write_jsonl(tmp_path / "r.jsonl", [record]))[0]
    assert task.install_config.test_cmd == "cd src && pytest -rA"
    assert task.install_config.install == ["pip install -e ."]
    assert task.extra == {"meta": {"llm_score": 3}, "license_name": "MIT"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"base_commit": "not-a-sha"}, "base_commit"),
        ({"FAIL_TO_PASS": "[not json"}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
        ({"repo": "no-slash"}, "repo"),
        ({"difficulty": "trivial"}, "difficulty"),
        ({"confounders": ["B99"]}, "confounders"),
        ({"problem_statement": ""}, "problem_statement"),
    ],
)
def test_bad_field_names_file_line_record_and_field(tmp_path, change, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [RECORD, {**RECORD, "instance_id": "octo__lib-8", **change}])
    with pytest.raises(TaskLoadError) as info:
        load_tasks(path)
    message = str(info.value)
    assert f"{path}:2" in message and "octo__lib-8" in message and f"field '{field}" in message
    assert "\n" not in message


def test_missing_field_and_bad_json_and_wrong_type(tmp_path):
    missing = {k: v for k, v in RECORD.items() if k != "base_commit"}
    for records, expected in (
        ([missing], "field 'base_commit': Field required"),
        (["{oops"], "not valid JSON"),
        (["[1, 2]"], "expected a JSON object"),
        ([{**RECORD, "family": "chess"}], "unknown family 'chess'"),
    ):
        with pytest.raises(TaskLoadError, match=expected):
            load_tasks(write_jsonl(tmp_path / "x.jsonl", records))


def test_skip_invalid_goes_on_and_reports(tmp_path):
    records = [RECORD, "{oops", {**RECORD, "instance_id": "octo__lib-9", "base_commit": "zz"}, {**RECORD, "instance_id": "octo__lib-10"}]
    errors: list[str] = []
    tasks = load_tasks(write_jsonl(tmp_path / "mixed.jsonl", records), skip_invalid=True, errors=errors)
    assert [t.instance_id for t in tasks] == ["octo__lib-7", "octo__lib-10"]
    assert len(errors) == 2 and "mixed.jsonl:2" in errors[0] and "mixed.jsonl:3" in errors[1]


def test_duplicates_and_folders_and_unknown_names(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [RECORD])
    write_jsonl(tmp_path / "b.jsonl", [RECORD])
    with pytest.raises(TaskLoadError, match="duplicate instance_id"):
        load_tasks(tmp_path)
    with pytest.raises(TaskLoadError, match="no such file, folder or shipped dataset"):
        load_tasks("no-such-dataset")
    with pytest.raises(TaskLoadError, match="no tasks found"):
        (tmp_path / "empty").mkdir()
        load_tasks(tmp_path / "empty")


def test_repo_toml_fills_install_config(tmp_path):
    (tmp_path / "repos" / "lib").mkdir(parents=True)
    (tmp_path / "repos" / "lib" / "repo.toml").write_text(
        'name = "octo/lib"\nlanguage = "go"\n[install]\npackages = ["golang-go"]\ntest_cmd = "go test -v ./..."\nlog_parser = "gotest"\n'
    )
    task = load_tasks(write_jsonl(tmp_path / "t.jsonl", [RECORD]))[0]
    assert task.install_config.packages == ["golang-go"] and task.language == "go"


def test_parse_task_infers_the_family():
    assert parse_task(RECORD).family == "swe"
    with pytest.raises(TaskLoadError, match="field 'family': missing"):
        parse_task({"instance_id": "x", "problem_statement": "y"})
