"""A tiny repository and a SWE-bench-format JSONL about it, made from scratch for a test.

The repository has three commits; the task's base is the second, so the
third (a later fix of something else) must not be reachable in the agent's
container.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CALC_V1 = '''"""Small statistics helpers."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b
'''

CALC_V2 = CALC_V1 + '''

def mean(values):
    """Arithmetic mean of a sequence of numbers."""
    values = list(values)
    return sum(values) / len(values)
'''

TESTS = '''from calc import add, mean, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(4, 5) == 20


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_generator():
    assert mean(x for x in (2, 4)) == 3
'''

GOLD = '''diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -13,4 +13,6 @@ def mul(a, b):
 def mean(values):
     """Arithmetic mean of a sequence of numbers."""
     values = list(values)
+    if not values:
+        raise ValueError("mean() of empty data")
     return sum(values) / len(values)
'''

TEST_PATCH = '''diff --git a/tests/test_calc.py b/tests/test_calc.py
--- a/tests/test_calc.py
+++ b/tests/test_calc.py
@@ -1,3 +1,5 @@
+import pytest
+
 from calc import add, mean, mul
 
 
@@ -15,3 +17,8 @@ def test_mean():
 
 def test_mean_generator():
     assert mean(x for x in (2, 4)) == 3
+
+
+def test_mean_of_empty_data_is_a_value_error():
+    with pytest.raises(ValueError, match="empty"):
+        mean([])
'''

F2P = ["tests/test_calc.py::test_mean_of_empty_data_is_a_value_error"]
P2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_mul", "tests/test_calc.py::test_mean",
       "tests/test_calc.py::test_mean_generator"]


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def make_dataset(root: Path) -> tuple[Path, Path, dict]:
    """(jsonl path, mirror dir, facts) for the repository ``acme/calc``."""
    work = root / "work"
    (work / "tests").mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "calc.py").write_text(CALC_V1)
    (work / "tests" / "__init__.py").write_text("")
    (work / "tests" / "test_calc.py").write_text(TESTS.replace("mean, ", "").replace(
        TESTS[TESTS.index("\n\ndef test_mean():"):], "\n"))
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "calc: add and mul", cwd=work)
    (work / "calc.py").write_text(CALC_V2)
    (work / "tests" / "test_calc.py").write_text(TESTS)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "calc: mean", cwd=work)
    base = _git("rev-parse", "HEAD", cwd=work).strip()
    (work / "README").write_text("calc: a later commit the agent must not see\n")
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "docs: later history", cwd=work)
    later = _git("rev-parse", "HEAD", cwd=work).strip()
    mirror = root / "mirror"
    mirror.mkdir()
    _git("clone", "-q", "--bare", str(work), str(mirror / "acme__calc.git"), cwd=root)
    record = {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "problem_statement": "mean([]) raises ZeroDivisionError\n\nIt should raise a ValueError saying the data is empty.",
        "hints_text": "",
        "created_at": "2025-01-02T00:00:00Z",
        "version": "0.1",
        "environment_setup_commit": base,
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "install_config": {
            "packages": ["python3-pytest"],
            "install": [],
            "test_cmd": ["python3 -m pytest -rA -p no:cacheprovider"],
            "log_parser": "pytest",
        },
        "meta": {"note": "an extra SWE-rebench-style field"},
    }
    path = root / "calc.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path, mirror, {"base": base, "later": later}
