"""Remove what sandgym left on an engine, found by its label (after a crash, or on demand)."""

from __future__ import annotations

import logging
import os
import socket

import docker
import docker.errors
from pydantic import BaseModel

from .engine import LABEL, translate_errors

__all__ = ["CleanupReport", "cleanup", "sweep_orphans"]

log = logging.getLogger(__name__)


class CleanupReport(BaseModel):
    containers: list[str] = []
    images: list[str] = []
    errors: list[str] = []


def cleanup(client: docker.DockerClient, *, run_label: str | None = None, images: bool = False) -> CleanupReport:
    """Force-remove every container (and with ``images``, every image) labelled ``sandgym``.

    ``run_label`` narrows it to one run's label value. Blocking.
    """
    selector = LABEL if run_label is None else f"{LABEL}={run_label}"
    report = CleanupReport()
    with translate_errors("listing sandgym containers"):
        # plain dicts: the model API inspects each one, which races with auto-removal
        containers = client.api.containers(all=True, filters={"label": selector})
    for container in containers:
        name = (container.get("Names") or [container["Id"][:12]])[0].lstrip("/")
        try:
            client.api.remove_container(container["Id"], force=True)
            report.containers.append(name)
        except docker.errors.NotFound:
            report.containers.append(name)  # it went by itself meanwhile
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # removal already in progress
                report.containers.append(name)
            else:
                report.errors.append(f"container {name}: {exc.explanation}")
    if images:
        with translate_errors("listing sandgym images"):
            found = client.images.list(filters={"label": selector})
        # children (snapshots, derived images) before their parents
        found.sort(key=lambda image: image.attrs.get("Created", ""), reverse=True)
        for image in found:
            name = image.tags[0] if image.tags else image.short_id
            try:
                client.images.remove(image.id, force=True)
                report.images.append(name)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                report.errors.append(f"image {name}: {exc.explanation}")
    log.info("cleanup removed %d containers, %d images", len(report.containers), len(report.images))
    return report


def _owner_dead(owner: str) -> bool:
    """True when ``host:pid`` names a process of this host that no longer runs."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def sweep_orphans(client: docker.DockerClient) -> list[str]:
    """Remove sandgym containers whose owning process on this host is dead.

    A process SIGKILLed between creating a container and starting it leaves
    one in state "created", which neither the runner nor the lifetime can
    end; the next provider on the host removes it (and any other orphan).
    """
    removed = []
    for container in client.api.containers(all=True, filters={"label": "sandgym.owner"}):
        owner = (container.get("Labels") or {}).get("sandgym.owner", "")
        if not _owner_dead(owner):
            continue
        try:
            client.api.remove_container(container["Id"], force=True)
            removed.append(container["Id"][:12])
        except docker.errors.APIError:
            continue  # already going
    if removed:
        log.info("removed %d orphaned sandbox(es) of dead processes: %s", len(removed), ", ".join(removed))
    return removed
