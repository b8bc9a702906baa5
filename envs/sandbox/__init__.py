"""Sandboxes: one async interface (``Sandbox``), a Docker backend, and cleanup by label."""

from .base import DEFAULT_CAPABILITIES, ExecResult, Sandbox, SandboxConfig, strip_ansi
from .cleanup import CleanupReport, cleanup
from .docker_backend import DockerProvider, DockerSandbox
from .engine import LABEL, connect, engine_url

__all__ = [
    "DEFAULT_CAPABILITIES",
    "ExecResult",
    "Sandbox",
    "SandboxConfig",
    "strip_ansi",
    "CleanupReport",
    "cleanup",
    "DockerProvider",
    "DockerSandbox",
    "LABEL",
    "connect",
    "engine_url",
]
