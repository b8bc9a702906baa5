"""The sandgym exception tree.

::

    SandgymError
    ├── InfrastructureError          the machinery failed, not the agent
    │   ├── SandboxError
    │   │   ├── SandboxUnavailable   (also ConnectionError) engine down or unreachable
    │   │   ├── SandboxDied          the container went away under us
    │   │   └── ImageNotFound        (also LookupError) no such image
    │   └── ImageBuildError          a recipe failed to build
    └── RecipeError                  (also ValueError) a malformed image recipe

A command that fails inside a sandbox is *not* an exception: it is an
``ExecResult`` with a non-zero exit code. Only the sandbox's own failure raises.
"""

from __future__ import annotations

__all__ = [
    "SandgymError",
    "InfrastructureError",
    "SandboxError",
    "SandboxUnavailable",
    "SandboxDied",
    "ImageNotFound",
    "ImageBuildError",
    "RecipeError",
]


class SandgymError(Exception):
    """Root of every error sandgym raises on purpose."""


class InfrastructureError(SandgymError):
    """The machinery failed (engine, image, container): retryable, never the agent's fault."""


class SandboxError(InfrastructureError):
    """A sandbox operation failed for a reason other than the command itself."""


class SandboxUnavailable(SandboxError, ConnectionError):
    """The container engine is down or unreachable."""


class SandboxDied(SandboxError):
    """The container stopped or vanished while it was in use."""


class ImageNotFound(SandboxError, LookupError):
    """The requested image does not exist locally and could not be pulled."""


class ImageBuildError(InfrastructureError):
    """An image recipe failed to build."""


class RecipeError(SandgymError, ValueError):
    """An image recipe is malformed (missing file, bad metadata)."""
