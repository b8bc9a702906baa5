"""Build recipes into tagged images, parents first, reusing what is already built."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions
from pydantic import BaseModel

from ..errors import ImageBuildError, RecipeError
from ..sandbox.engine import LABEL, translate_errors
from .bootstrap import debootstrap_import, label_image, try_pull
from .recipes import TAG_PREFIX, Recipe, context_files, load_recipes, recipe_hash

__all__ = ["ImageBuilder", "ImageStatus", "host_ca_bundle"]

log = logging.getLogger(__name__)

# Called with (recipe name, one line of build output).
OnEvent = Callable[[str, str], None]

_CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE")
_CA_CONTEXT_PATH = ".sandgym/host-ca.crt"


@contextlib.contextmanager
def _build_errors(name: str):
    """The engine refusing a build (e.g. a Dockerfile parse error, HTTP 400) is a build failure."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"building {name}: {exc.explanation or exc}") from exc


def host_ca_bundle() -> Path | None:
    """The CA bundle the host is configured to trust (``$SSL_CERT_FILE`` and friends), if any."""
    for var in _CA_ENV:
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    return None


class ImageStatus(BaseModel):
    name: str
    tag: str
    kind: str
    built: bool
    size_mb: float | None = None
    source: str | None = None
    description: str = ""


class ImageBuilder:
    """Knows every recipe's tag and builds what is missing.

    ``trust_host_ca`` (default: on where the host has a CA bundle configured)
    puts that bundle into every Dockerfile build context as
    ``.sandgym/host-ca.crt``, so images built behind a TLS-intercepting proxy
    can still reach PyPI or npm. ``pull`` tries a registry for base images
    before falling back to debootstrap (``SANDGYM_NO_PULL=1`` turns it off).
    """

    def __init__(
        self,
        client: docker.DockerClient,
        recipes: dict[str, Recipe] | None = None,
        *,
        trust_host_ca: bool | None = None,
        pull: bool | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        self.client = client
        # A build that prints nothing for this long is taken as hung and aborted
        # (the engine cancels a build whose client goes away).
        self.idle_timeout = idle_timeout or float(os.environ.get("SANDGYM_BUILD_IDLE_TIMEOUT", 1800))
        self.recipes = recipes if recipes is not None else load_recipes()
        ca = host_ca_bundle() if trust_host_ca is not False else None
        self.extra_context = {_CA_CONTEXT_PATH: ca.read_bytes() if ca else b""}
        self.pull = pull if pull is not None else os.environ.get("SANDGYM_NO_PULL", "") in ("", "0")
        self._tags: dict[str, str] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # --- naming ------------------------------------------------------------------

    def recipe(self, name: str) -> Recipe:
        try:
            return self.recipes[name]
        except KeyError:
            known = ", ".join(sorted(self.recipes))
            raise RecipeError(f"unknown image recipe {name!r} (known: {known})") from None

    def tag(self, name: str) -> str:
        """``sandgym/<name>:<hash>`` for the recipe (parents included), computed once per builder."""
        if name not in self._tags:
            recipe = self.recipe(name)
            parent = self.tag(recipe.base) if recipe.base else None
            extra = self.extra_context if recipe.kind == "dockerfile" else None
            self._tags[name] = f"{recipe.repository}:{recipe_hash(recipe, parent, extra)}"
        return self._tags[name]

    def exists(self, name: str) -> bool:
        return self._image_exists(self.tag(name))

    def status(self) -> list[ImageStatus]:
        rows = []
        for name, recipe in sorted(self.recipes.items()):
            tag = self.tag(name)
            try:
                image = self.client.images.get(tag)
                size, built = round(image.attrs["Size"] / 1e6, 1), True
                source = image.labels.get("sandgym.source")
            except docker.errors.ImageNotFound:
                size, built, source = None, False, None
            rows.append(
                ImageStatus(
                    name=name, tag=tag, kind=recipe.kind, built=built, size_mb=size,
                    source=source, description=recipe.description,
                )
            )
        return rows

    # --- building ----------------------------------------------------------------

    def build(self, name: str, *, force: bool = False, on_event: OnEvent | None = None) -> str:
        """Build ``name`` (and its parents where missing); return its tag. Blocking."""
        recipe = self.recipe(name)
        if recipe.base:
            self.build(recipe.base, on_event=on_event)
        tag = self.tag(name)
        with self._lock(tag):
            if not force and self.exists(name):
                return tag
            emit = (lambda line: on_event(name, line)) if on_event else (lambda line: None)
            started = time.monotonic()
            labels = {LABEL: "image", "sandgym.recipe": name, "sandgym.tag": tag}
            try:
                if recipe.kind == "base":
                    self._build_base(recipe, tag, labels, emit)
                else:
                    self._build_dockerfile(recipe, tag, labels, emit)
            except docker.errors.APIError as exc:
                raise ImageBuildError(f"building {name}: {exc.explanation or exc}") from exc
            log.info("built %s as %s in %.0fs", name, tag, time.monotonic() - started)
            return tag

    def _lock(self, tag: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(tag, threading.Lock())

    def _build_base(self, recipe: Recipe, tag: str, labels: dict[str, str], emit) -> None:
        spec = recipe.bootstrap
        assert spec is not None
        if self.pull and spec.pull and try_pull(self.client, spec.pull, emit):
            label_image(self.client, spec.pull, tag, {**labels, "sandgym.source": f"pull:{spec.pull}"}, emit)
            return
        with translate_errors(f"building {recipe.name}"):
            debootstrap_import(self.client, spec, tag, {**labels, "sandgym.source": "debootstrap"}, emit)

    def _build_dockerfile(self, recipe: Recipe, tag: str, labels: dict[str, str], emit) -> None:
        parent = self.tag(recipe.base) if recipe.base else None
        with tempfile.SpooledTemporaryFile(max_size=64 << 20) as context:
            with tarfile.open(fileobj=context, mode="w") as tar:
                for path in context_files(recipe):
                    tar.add(path, arcname=path.relative_to(recipe.path).as_posix(), recursive=False)
                self._add_extra_context(tar)
            context.seek(0)
            self._run_build(recipe.name, context, tag, parent, labels, emit)

    def _add_extra_context(self, tar: tarfile.TarFile, files: dict[str, bytes] | None = None) -> None:
        for name, data in {**self.extra_context, **(files or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

    def _run_build(self, name: str, context, tag: str, parent: str | None, labels: dict[str, str], emit) -> None:
        tail: list[str] = []
        with translate_errors(f"building {name}"), _build_errors(name), self._hung_build(name, tail):
            events = self.client.api.build(
                fileobj=context,
                custom_context=True,
                tag=tag,
                buildargs={"BASE": parent} if parent else None,
                labels={**labels, "sandgym.parent": parent or "", "sandgym.source": "dockerfile"},
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                timeout=self.idle_timeout,
            )
            error: str | None = None
            for event in events:  # read to the end, even after an error: that releases the HTTP response
                if "error" in event:
                    if error is None:
                        detail = " | ".join(tail[-3:])
                        error = f"building {name}: {event['error'].strip()}" + (f" ({detail})" if detail else "")
                    continue
                line = event.get("stream", "").strip()
                if line:
                    tail.append(line)
                    del tail[:-10]
                    emit(line)
            if error is not None:
                raise ImageBuildError(error)

    @contextlib.contextmanager
    def _hung_build(self, name: str, tail: list[str]):
        """A read timeout on the build stream means no output for ``idle_timeout``: a hung build."""
        try:
            yield
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            if "timed out" not in str(exc).lower():
                raise
            last = f" (last output: {tail[-1][:200]})" if tail else ""
            raise ImageBuildError(
                f"building {name}: no output for {self.idle_timeout:g}s, aborted as hung{last}"
            ) from exc

    # --- generated images (families build per-repo and per-task layers this way) ---------

    def generated_tag(self, repository: str, dockerfile: str, parent: str | None, key: str) -> str:
        digest = hashlib.sha256(f"{repository}\n{parent}\n{key}\n{dockerfile}".encode())
        for name, data in sorted(self.extra_context.items()):
            digest.update(name.encode() + data)
        return f"{repository}:{digest.hexdigest()[:12]}"

    def build_generated(
        self,
        repository: str,
        dockerfile: str,
        *,
        parent: str | None,
        key: str,
        files: Callable[[], dict[str, bytes | Path]] | None = None,
        labels: dict[str, str] | None = None,
        on_event: OnEvent | None = None,
        force: bool = False,
    ) -> str:
        """Build a Dockerfile made by code (``FROM ${BASE}`` gets ``parent``).

        The tag hashes ``dockerfile``, ``parent`` and ``key`` (what the context
        files derive from, e.g. a repository and commit), so ``files`` is only
        called, and the context only made, when the image is missing.
        """
        tag = self.generated_tag(repository, dockerfile, parent, key)
        with self._lock(tag):
            if not force and self._image_exists(tag):
                return tag
            name = repository.removeprefix(TAG_PREFIX)
            emit = (lambda line: on_event(name, line)) if on_event else (lambda line: None)
            started = time.monotonic()
            with tempfile.SpooledTemporaryFile(max_size=64 << 20) as context:
                with tarfile.open(fileobj=context, mode="w") as tar:
                    self._add_extra_context(tar, {"Dockerfile": dockerfile.encode()})
                    for arcname, content in (files() if files else {}).items():
                        if isinstance(content, Path):
                            tar.add(content, arcname=arcname)
                        else:
                            self._add_extra_context(tar, {arcname: content})
                context.seek(0)
                all_labels = {LABEL: "image", "sandgym.recipe": name, "sandgym.tag": tag, **(labels or {})}
                self._run_build(name, context, tag, parent, all_labels, emit)
            log.info("built %s in %.0fs", tag, time.monotonic() - started)
            return tag

    def _image_exists(self, tag: str) -> bool:
        try:
            self.client.images.get(tag)
            return True
        except docker.errors.ImageNotFound:
            return False
