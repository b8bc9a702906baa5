"""The shipped SWE task set: its shape, its repositories, and a full validation through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from sandgym.envs.core import get_family
from sandgym.envs.families.swe.repos import resolve_repo
from sandgym.envs.tasks import load_tasks, tasks_root

SANDGYM = os.path.join(os.path.dirname(sys.executable), "sandgym")


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("swe")


def test_the_set_has_the_promised_shape(tasks):
    repos = Counter(t.repo for t in tasks)
    assert len(tasks) >= 12 and len(repos) >= 4
    assert len({t.language for t in tasks}) >= 2 and "python" in {t.language for t in tasks}
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    for t in tasks:
        assert t.install_config is not None, t.instance_id
        assert t.fail_to_pass and t.problem_statement.strip()
        assert t.source and str(tasks_root()) in t.source or "tasks/swe" in t.source


def test_each_repository_has_history_and_a_real_suite(tasks):
    for repo in {t.repo for t in tasks}:
        task = next(t for t in tasks if t.repo == repo)
        path = resolve_repo(task)
        log = subprocess.run(["git", "log", "--format=%H"], cwd=path, capture_output=True, text=True, check=True)
        commits = log.stdout.split()
        assert len(commits) >= 4, f"{repo} has {len(commits)} commits"
        for t in tasks:
            if t.repo == repo:
                assert t.base_commit in commits, f"{t.instance_id}: base commit not in the rebuilt history"
        suite = max(len(t.pass_to_pass) for t in tasks if t.repo == repo)
        assert suite >= 20, f"{repo} has only {suite} passing tests"


def test_the_gold_fix_is_not_in_the_history(tasks, tmp_path):
    """No blob anywhere in a repository's history equals a file as the gold patch leaves it."""
    for t in tasks:
        repo = resolve_repo(t)
        work = tmp_path / t.instance_id
        subprocess.run(["git", "clone", "-q", repo, str(work)], check=True)
        subprocess.run(["git", "checkout", "-q", t.base_commit], cwd=work, check=True)
        subprocess.run(["git", "apply"], input=t.patch, text=True, cwd=work, check=True)
        changed = subprocess.run(["git", "diff", "--name-only"], cwd=work, capture_output=True, text=True).stdout.split()
        assert changed, t.instance_id
        for path in changed:
            blob = subprocess.run(["git", "hash-object", path], cwd=work, capture_output=True, text=True).stdout.strip()
            seen = subprocess.run(["git", "cat-file", "-e", blob], cwd=repo, capture_output=True)
            assert seen.returncode != 0, f"{t.instance_id}: the fixed {path} is already in the history"


@pytest.mark.docker
@pytest.mark.slow
def test_validate_the_shipped_set_through_the_cli(tasks, builder):
    out = subprocess.run([SANDGYM, "tasks", "validate", "tasks/swe" if os.path.isdir("tasks/swe") else "swe",
                          "--json", "-j", "3"], capture_output=True, text=True, timeout=3000)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["tasks"] == len(tasks) >= 12
    assert report["oracle_pass"] == report["tasks"]
    assert report["empty_pass"] == 0
    assert report["repos"] >= 4 and len(report["languages"]) >= 2
    assert report["failures"] == []
    # tasks of one repository share its environment image
    family = get_family("swe")
    parents: dict[str, set[str]] = {}
    for t in tasks:
        image = family.image(t, builder)
        parent = builder.client.images.get(image).labels["sandgym.parent"]
        parents.setdefault(t.repo, set()).add(parent)
    assert all(len(p) == 1 for p in parents.values()), parents
    assert len({next(iter(p)) for p in parents.values()}) == len(parents)
