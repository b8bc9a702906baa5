"""`sandgym doctor`: what this machine can run, and the one command that fixes each gap."""

from __future__ import annotations

import os
import shutil
from typing import Literal

from pydantic import BaseModel

from ..envs.errors import SandgymError
from ..envs.images import ImageBuilder
from ..envs.qemu import QEMU_SYSTEM, QEMU_USER, probe_accel
from ..envs.sandbox import connect, engine_url

__all__ = ["Check", "run_checks"]

Status = Literal["ok", "warn", "fail"]
MIN_FREE_GB = 20.0


class Check(BaseModel):
    name: str
    status: Status
    detail: str
    fix: str | None = None


def _engine() -> tuple[Check, object | None]:
    url = engine_url()
    try:
        client = connect(timeout=10)
        version = client.version()
        info = client.info()
    except SandgymError as exc:
        fix = "dockerd >/var/log/dockerd.log 2>&1 &" if shutil.which("dockerd") else "apt-get install -y docker.io"
        return Check(name="docker engine", status="fail", detail=str(exc), fix=fix), None
    detail = (
        f"{url}: server {version.get('Version')} (API {version.get('ApiVersion')}), "
        f"{info.get('Driver')}, cgroup v{info.get('CgroupVersion', '?')}"
    )
    return Check(name="docker engine", status="ok", detail=detail), client


def _disk(path: str, name: str) -> Check:
    try:
        free = shutil.disk_usage(path).free / 1e9
    except OSError as exc:
        return Check(name=name, status="warn", detail=f"{path}: {exc}")
    status: Status = "ok" if free >= MIN_FREE_GB else "warn"
    fix = None if status == "ok" else "sandgym cleanup --images   # or free space; images need ~5 GB each family"
    return Check(name=name, status=status, detail=f"{free:.0f} GB free at {path}", fix=fix)


def _binary(name: str, package: str, why: str) -> Check:
    path = shutil.which(name)
    if path:
        return Check(name=name, status="ok", detail=path)
    return Check(name=name, status="warn", detail=f"missing ({why})", fix=f"apt-get install -y {package}")


def _kvm() -> Check:
    probe = probe_accel("kvm")
    if probe.usable:
        return Check(name="kvm", status="ok", detail=probe.detail)
    tcg = probe_accel("tcg")
    fallback = "TCG works" if tcg.usable else f"TCG also failed: {tcg.detail}"
    return Check(
        name="kvm",
        status="warn",
        detail=f"not usable: {probe.detail}; {fallback} (sandgym falls back to it)",
        fix=None if tcg.usable else "apt-get install -y qemu-system-x86",
    )


def run_checks() -> list[Check]:
    engine, client = _engine()
    checks = [engine]
    if client is not None:
        root = client.info().get("DockerRootDir", "/var/lib/docker")
        checks.append(_disk(root if os.path.exists(root) else "/", "disk (docker)"))
        builder = ImageBuilder(client)
        rows = builder.status()
        built = sum(row.built for row in rows)
        checks.append(
            Check(
                name="images",
                status="ok" if built == len(rows) else "warn",
                detail=f"{built}/{len(rows)} recipes built",
                fix=None if built == len(rows) else "sandgym images build",
            )
        )
    checks.append(_disk(os.environ.get("TMPDIR", "/tmp"), "disk (tmp)"))
    checks.append(_binary("debootstrap", "debootstrap", "base images without a registry"))
    checks.append(_binary(QEMU_USER[0], "qemu-user-static", "running cross-compiled code"))
    checks.append(_binary(QEMU_SYSTEM, "qemu-system-x86", "booting kernels"))
    checks.append(_kvm())
    return checks
