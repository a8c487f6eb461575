"""Loading user classes named in the config: ``task.class`` and the restore listener."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from millpond.api import StreamTask
from millpond.changelog.restore import RestoreListener
from millpond.config import Config
from millpond.tasks.errors import TaskConfigError, user_frame


def load_task_class(config: Config) -> type[StreamTask]:
    """Import ``task.class`` (``package.module.ClassName``, importable from the cwd)."""
    path = config.job.task_class
    if not path:
        raise config.missing("task.class", "the job's millpond.StreamTask class",
                             "task.class=myjobs.counter.Counter")
    cls = _import(config, "task.class", path)
    if not (isinstance(cls, type) and issubclass(cls, StreamTask)):
        raise TaskConfigError(f"{config.location('task.class')}: task.class={path} is not a "
                              "millpond.StreamTask subclass")
    return cls


def load_restore_listener(config: Config) -> RestoreListener | None:
    """Instantiate ``task.restore.listener.class`` if set (callbacks around each restore)."""
    path = config.get("task.restore.listener.class")
    if not path:
        return None
    listener: RestoreListener = _import(config, "task.restore.listener.class", path)()
    return listener


def _import(config: Config, key: str, path: str) -> Any:
    where = config.location(key)
    module_name, _, cls_name = path.rpartition(".")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:  # where in the user's file, not where millpond imported it
        raise TaskConfigError(
            f"{where}: {key}={path} cannot be imported: {type(exc).__name__} at "
            f"{exc.filename}:{exc.lineno}: {exc.msg}") from exc
    except (ImportError, ValueError) as exc:
        frame = user_frame(exc)
        raise TaskConfigError(f"{where}: {key}={path} cannot be imported: {exc}"
                              + (f" (at {frame})" if frame else "")) from exc
    except Exception as exc:  # the module's own code raised while it was imported
        frame = user_frame(exc)
        raise TaskConfigError(
            f"{where}: {key}={path} cannot be imported: importing {module_name} raised "
            f"{type(exc).__name__}: {exc}" + (f" (at {frame})" if frame else "")) from exc
    try:
        return getattr(module, cls_name)
    except AttributeError as exc:
        raise TaskConfigError(f"{where}: {key}={path} cannot be imported: {exc}") from exc
