"""Task models (one per family, a union on ``family``) and loaders for shipped and external datasets."""

from .loader import TaskLoadError, load_tasks, parse_task, resolve_source, tasks_root
from .models import FAMILY_MODELS, InstallConfig, SWETask, Task, TaskBase

__all__ = [
    "TaskLoadError",
    "load_tasks",
    "parse_task",
    "resolve_source",
    "tasks_root",
    "FAMILY_MODELS",
    "InstallConfig",
    "SWETask",
    "Task",
    "TaskBase",
]
