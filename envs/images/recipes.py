"""Image recipes: one folder per image under ``images/``, and the hash that names each build.

A folder holds ``image.toml`` and either a ``[base]`` table (an operating
system image: pulled from a registry, or bootstrapped from Debian packages
where none answers) or a ``Dockerfile`` with its build context. A Dockerfile
recipe names its parent with ``base = "<recipe>"`` and starts with
``ARG BASE`` / ``FROM ${BASE}``; the builder passes the parent's tag.

The tag of a build is ``sandgym/<name>:<hash>``, the hash covering the
recipe's files, its parent's tag and any extra context, so a changed recipe
(or a changed parent) rebuilds and an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import RecipeError

__all__ = ["BaseSpec", "Recipe", "recipes_root", "load_recipe", "load_recipes", "recipe_hash", "context_files"]

METADATA = "image.toml"
TAG_PREFIX = "sandgym/"


def recipes_root() -> Path:
    """The shipped recipes: ``sandgym/images`` when installed, ``images/`` in a checkout."""
    import sandgym.images  # a data-only package: its folder is the recipe root

    return Path(next(iter(sandgym.images.__path__)))


class BaseSpec(BaseModel):
    """An operating-system image made without a Dockerfile."""

    model_config = ConfigDict(extra="forbid")

    pull: str | None = Field(default=None, description="Registry reference tried first, e.g. debian:bookworm-slim.")
    suite: str = Field(description="Debian suite for the debootstrap fallback.")
    mirror: str = Field(default="http://deb.debian.org/debian", description="Debian mirror for debootstrap.")
    variant: str = Field(default="minbase", description="debootstrap --variant.")
    include: list[str] = Field(default_factory=list, description="Extra packages for debootstrap --include.")


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: Path
    description: str = ""
    kind: Literal["base", "dockerfile"]
    base: str | None = Field(default=None, description="Parent recipe (Dockerfile recipes).")
    bootstrap: BaseSpec | None = None

    @property
    def repository(self) -> str:
        return TAG_PREFIX + self.name


def load_recipe(path: Path) -> Recipe:
    """Read one recipe folder; a malformed one raises RecipeError naming the file and field."""
    meta_path = path / METADATA
    if not meta_path.is_file():
        raise RecipeError(f"{meta_path}: missing (every recipe folder needs an {METADATA})")
    try:
        meta = tomllib.loads(meta_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{meta_path}: not valid TOML: {exc}") from exc
    has_dockerfile = (path / "Dockerfile").is_file()
    if "base" in meta and isinstance(meta["base"], dict):
        kind, bootstrap, parent = "base", meta.pop("base"), None
        if has_dockerfile:
            raise RecipeError(f"{meta_path}: a [base] recipe cannot also have a Dockerfile")
    else:
        kind, bootstrap, parent = "dockerfile", None, meta.pop("base", None)
        if not has_dockerfile:
            raise RecipeError(f"{path}: no Dockerfile and no [base] table in {METADATA}")
        if parent is None:
            raise RecipeError(f"{meta_path}: field 'base': missing (the parent recipe's name)")
    for key in ("name", "path", "kind", "bootstrap"):
        if key in meta:
            raise RecipeError(f"{meta_path}: field '{key}': not allowed in {METADATA} (sandgym sets it)")
    try:
        return Recipe(
            name=path.name,
            path=path,
            kind=kind,
            base=parent,
            bootstrap=bootstrap,
            **meta,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ["base" if i == 0 and p == "bootstrap" else str(p) for i, p in enumerate(err["loc"])]
        field = ".".join(loc)
        raise RecipeError(f"{meta_path}: field '{field}': {err['msg']}") from exc


def load_recipes(root: Path | None = None, extra: Iterable[Path] = ()) -> dict[str, Recipe]:
    """Every recipe under ``root`` (default: the shipped ones) plus folders in ``extra``."""
    root = root or recipes_root()
    folders = [p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith((".", "_"))]
    recipes = {}
    for folder in [*folders, *extra]:
        recipe = load_recipe(Path(folder))
        recipes[recipe.name] = recipe
    for recipe in recipes.values():
        if recipe.base is not None and recipe.base not in recipes:
            raise RecipeError(f"{recipe.path / METADATA}: field 'base': unknown recipe {recipe.base!r}")
    for recipe in recipes.values():
        chain = [recipe.name]
        parent = recipe.base
        while parent is not None:
            if parent in chain:
                raise RecipeError(
                    f"{recipe.path / METADATA}: field 'base': cycle {' -> '.join([*chain, parent])}"
                )
            chain.append(parent)
            parent = recipes[parent].base
    return recipes


def context_files(recipe: Recipe) -> list[Path]:
    """The recipe's files, sorted, as the build context sends them (Python caches skipped)."""
    files = []
    for dirpath, dirnames, filenames in os.walk(recipe.path):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".pyc"):
                continue
            files.append(Path(dirpath) / name)
    return files


def recipe_hash(recipe: Recipe, parent_tag: str | None, extra: dict[str, bytes] | None = None) -> str:
    """12 hex digits naming this recipe's build given its parent and extra context."""
    digest = hashlib.sha256()
    digest.update(f"recipe:{recipe.name}\nparent:{parent_tag}\n".encode())
    for path in context_files(recipe):
        rel = path.relative_to(recipe.path).as_posix()
        mode = "x" if os.access(path, os.X_OK) else "-"
        digest.update(f"file:{rel}:{mode}:{path.stat().st_size}\n".encode())
        digest.update(path.read_bytes())
    for name, data in sorted((extra or {}).items()):
        digest.update(f"extra:{name}:{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()[:12]
