"""The package as a user gets it: a plain (non-editable) ``pip install`` into a fresh venv.

The checkout keeps ``envs/``, ``agents/``, ``harness/``, ``images/`` at its top
level; installed, they must all live under one ``sandgym`` namespace, with the
image recipes and the in-container helper scripts shipped as package data.
Every check runs the venv's own interpreter from a directory outside the
checkout, so nothing can be picked up from the source tree by accident.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME = PYPROJECT["project"]["name"]
VERSION = PYPROJECT["project"]["version"]
INSTALL_TIMEOUT = 600
MAX_PACKAGE_BYTES = 5_000_000  # the package is source and a few recipes; a copied venv would be far bigger


@dataclass
class Install:
    venv: Path
    python: Path
    purelib: Path
    seconds: float
    pip_output: str


def clean_env() -> dict[str, str]:
    """The environment minus anything that would point Python at the checkout or its venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> Install:
    """A fresh venv with the checkout pip-installed into it (not editable; deps may come from PyPI)."""
    base = tmp_path_factory.mktemp("package")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=clean_env())
    python = venv / "bin" / "python"
    build_dir_existed = (ROOT / "build").exists()
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", str(ROOT)],
            cwd=base, env=clean_env(), capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
        )
    finally:
        if not build_dir_existed:  # setuptools builds in-tree; leave the checkout as we found it
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    purelib = run_python(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])", base).strip()
    return Install(venv=venv, python=python, purelib=Path(purelib), seconds=seconds, pip_output=proc.stdout)


def run_python(python: Path, code: str, cwd: Path, *, check: bool = True) -> str:
    """Run ``code`` with the venv's interpreter in ``cwd``; return stdout (stderr on failure)."""
    proc = subprocess.run(
        [str(python), "-c", code], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    if check:
        assert proc.returncode == 0, f"{code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        return proc.stdout
    return proc.stdout + proc.stderr if proc.returncode == 0 else f"exit {proc.returncode}\n{proc.stderr}"


def checkout_recipe_names() -> list[str]:
    images = ROOT / "images"
    return sorted(p.name for p in images.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def test_install_is_small_and_only_the_package(install):
    """The wheel holds ``sandgym/``, its dist-info and the console script: no .venv, tests or top-level envs/agents."""
    dist_info = next(install.purelib.glob(f"{NAME}-{VERSION}.dist-info"))
    top_level = set()
    for line in (dist_info / "RECORD").read_text().splitlines():
        path = line.rsplit(",", 2)[0]
        top_level.add(path.split("/")[0])
        assert ".venv" not in path and "site-packages" not in path, f"the checkout's venv leaked in: {path}"
        assert not path.startswith(("sandgym/tests", "tests/")), path
    assert top_level <= {"sandgym", dist_info.name, ".."}, top_level
    size = sum(f.stat().st_size for f in (install.purelib / "sandgym").rglob("*") if f.is_file())
    assert size < MAX_PACKAGE_BYTES, f"installed sandgym/ is {size / 1e6:.1f} MB"
    for name in ("agents", "envs", "harness", "images", "tasks"):
        assert not (install.purelib / name).exists(), f"top-level {name} installed"


def test_recipes_ship_inside_site_packages(install, tmp_path):
    """``recipes_root()`` is the installed copy (not the checkout) and holds the shipped recipe files."""
    out = run_python(
        install.python,
        "from sandgym.envs.images import recipes_root; print(recipes_root())",
        tmp_path,
    )
    root = Path(out.strip())
    assert root.is_relative_to(install.purelib), f"{root} is not inside {install.purelib}"
    assert not root.resolve().is_relative_to(ROOT), f"{root} points into the checkout"
    assert (root / "debian-bookworm" / "image.toml").is_file()
    assert (root / "sandbox" / "Dockerfile").is_file()
    for source in (ROOT / "images").rglob("*"):
        if source.is_file() and "__pycache__" not in source.parts:
            shipped = root / source.relative_to(ROOT / "images")
            assert shipped.is_file(), f"{shipped} missing from the install"
            assert shipped.read_bytes() == source.read_bytes(), f"{shipped} differs from the checkout"


def test_installed_recipes_match_the_checkout(install, tmp_path):
    """``load_recipes()`` finds the checkout's recipes, and hashes them alike (same image tags either way)."""
    code = (
        "import json\n"
        "from sandgym.envs.images import load_recipes, recipe_hash\n"
        "print(json.dumps({n: recipe_hash(r, 'parent') for n, r in load_recipes().items()}))\n"
    )
    installed = json.loads(run_python(install.python, code, tmp_path))
    assert sorted(installed) == checkout_recipe_names()

    from sandgym.envs.images import load_recipes, recipe_hash

    checkout = {n: recipe_hash(r, "parent") for n, r in load_recipes(ROOT / "images").items()}
    assert installed == checkout


def test_sandbox_helper_scripts_ship_as_source(install, tmp_path):
    """``_runner`` and ``_capture`` (copied into containers as source) are installed as .py files."""
    code = (
        "import json, importlib.util\n"
        "print(json.dumps({m: importlib.util.find_spec('sandgym.envs.sandbox.' + m).origin "
        "for m in ('_runner', '_capture')}))\n"
    )
    origins = json.loads(run_python(install.python, code, tmp_path))
    for module, origin in origins.items():
        path = Path(origin)
        assert path.suffix == ".py" and path.is_file(), origin
        assert path.is_relative_to(install.purelib), origin
        assert path.read_bytes() == (ROOT / "envs" / "sandbox" / f"{module}.py").read_bytes()


def test_console_script_prints_the_version(install, tmp_path):
    """The ``sandgym`` console script in the venv answers ``--version`` with pyproject's version."""
    script = install.venv / "bin" / "sandgym"
    assert script.is_file()
    proc = subprocess.run(
        [str(script), "--version"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sandgym {VERSION}"


@pytest.mark.parametrize("module", ["agents", "envs", "harness", "images", "tasks"])
def test_checkout_folders_are_not_top_level_modules(install, tmp_path, module):
    """``import agents`` / ``import envs`` (and the other mapped folders) fail: they exist only under sandgym.

    Each folder that has files is importable as ``sandgym.<folder>`` instead.
    """
    out = run_python(install.python, f"import {module}", tmp_path, check=False)
    assert out.startswith("exit ") and "ModuleNotFoundError" in out, out
    if any(p.is_file() for p in (ROOT / module).rglob("*")):  # an empty folder ships nothing to import
        run_python(install.python, f"import sandgym.{module}", tmp_path)
