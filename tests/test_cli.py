"""The `sandgym` command line, run as a user would: a real process, real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sandgym.envs.qemu import probe_accel
from sandgym.envs.sandbox import LABEL

pytestmark = [pytest.mark.docker]

SANDGYM = os.path.join(os.path.dirname(sys.executable), "sandgym")


def sandgym(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SANDGYM, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def test_version():
    out = sandgym("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("sandgym ")


def test_doctor_reports_every_check_as_json():
    out = sandgym("doctor", "--json")
    assert out.returncode == 0, out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    assert checks["docker engine"]["status"] == "ok"
    assert "server" in checks["docker engine"]["detail"]
    for name in ("debootstrap", "qemu-aarch64-static", "qemu-system-x86_64", "kvm", "images", "disk (docker)"):
        assert name in checks, f"doctor has no {name} check"
    kvm = checks["kvm"]
    # whatever this host's KVM does, the answer comes from a real probe, and a broken KVM comes with TCG's state
    assert kvm["status"] in ("ok", "warn")
    assert "probe" in kvm["detail"] or "not usable" in kvm["detail"]


def test_doctor_with_a_dead_engine_fails_with_the_fix(tmp_path):
    out = sandgym("doctor", "--json", env={"DOCKER_HOST": f"unix://{tmp_path}/dead.sock"})
    assert out.returncode == 1
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    assert checks["docker engine"]["status"] == "fail"
    assert checks["docker engine"]["fix"]


def test_engine_down_is_one_line_without_traceback(tmp_path):
    out = sandgym("images", "list", env={"DOCKER_HOST": f"unix://{tmp_path}/dead.sock"})
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Docker engine unreachable" in lines[0]


def test_exec_prints_output_and_passes_the_exit_code():
    out = sandgym("exec", "--", "echo hello from the sandbox; exit 3")
    assert out.stdout == "hello from the sandbox\n"
    assert out.returncode == 3


def test_exec_with_a_bad_image_is_one_clear_line():
    out = sandgym("exec", "--image", "sandgym/none:missing", "true")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "sandgym/none:missing" in out.stderr


def test_images_list_json_shows_tags_and_state():
    out = sandgym("images", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert {"debian-bookworm", "debian-trixie", "sandbox"} <= set(rows)
    assert rows["sandbox"]["built"] is True
    assert rows["sandbox"]["tag"].startswith("sandgym/sandbox:")


def test_unknown_recipe_is_one_clear_line():
    out = sandgym("images", "build", "no-such-recipe")
    assert out.returncode == 1
    assert "no-such-recipe" in out.stderr and "known:" in out.stderr
    assert "Traceback" not in out.stderr


def test_cleanup_with_images_removes_containers_and_images_of_a_run(client, sandbox_image):
    label = {LABEL: "pytest-cli"}
    container = client.containers.run(sandbox_image, ["sleep", "600"], detach=True, labels=label)
    image = container.commit(repository="sandgym/test-cli", tag="x", conf={"Labels": label})
    out = sandgym("cleanup", "--images", "--run", "pytest-cli")
    assert out.returncode == 0, out.stderr
    assert "removed 1 container(s), 1 image(s)" in out.stdout
    assert not client.api.containers(all=True, filters={"label": f"{LABEL}=pytest-cli"})
    assert not client.images.list(filters={"label": f"{LABEL}=pytest-cli"})
    assert client.images.get(sandbox_image)  # other images are untouched
    del image


def test_qemu_probe_tells_working_from_broken():
    tcg = probe_accel("tcg")
    assert tcg.usable, tcg.detail
    bogus = probe_accel("no-such-accelerator")
    assert not bogus.usable
    assert bogus.detail


def test_tasks_list_and_show():
    out = sandgym("tasks", "list", "swe", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) >= 12 and {"instance_id", "repo", "language", "difficulty"} <= set(rows[0])
    first = rows[0]["instance_id"]
    shown = sandgym("tasks", "show", first)
    assert shown.returncode == 0 and first in shown.stdout and "problem statement" in shown.stdout
    record = json.loads(sandgym("tasks", "show", first, "--json").stdout)
    assert record["instance_id"] == first and isinstance(record["FAIL_TO_PASS"], list)


def test_tasks_bad_file_is_one_line_and_skip_invalid_goes_on(tmp_path):
    good = json.loads(sandgym("tasks", "show", "verso-1", "--json").stdout)
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "instance_id": "broken-1", "base_commit": "xyz"}) + "\n")
    out = sandgym("tasks", "list", str(path))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"{path}:2" in line and "broken-1" in line and "base_commit" in line
    out = sandgym("tasks", "list", str(path), "--skip-invalid", "--json")
    assert out.returncode == 0
    assert [r["instance_id"] for r in json.loads(out.stdout)] == ["verso-1"]
    assert "broken-1" in out.stderr


def test_run_with_a_dead_engine_is_one_line_and_writes_nothing(tmp_path):
    out = sandgym("run", "--tasks", "swe", "--agent", "oracle", "--out", str(tmp_path / "run"),
                  env={"DOCKER_HOST": f"unix://{tmp_path}/dead.sock"})
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "Docker engine unreachable" in out.stderr
    assert not (tmp_path / "run" / "trajectories").exists()
