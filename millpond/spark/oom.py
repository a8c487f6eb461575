"""Spark running out of memory, said in one line: what ran out and which option to raise.

Spark reports memory trouble in many shapes: a ``java.lang.OutOfMemoryError`` inside a
``Py4JJavaError`` (whose ``str()`` may itself fail), a driver JVM that died of it (Spark
exits with code 52, and Python only sees the gateway's socket close), a task result over
``spark.driver.maxResultSize``, or a Python worker killed mid-task. :func:`explain` turns any
of these into a sentence for :class:`~millpond.spark.errors.SparkMemoryError`; the JVM's
console (:mod:`millpond.spark.console`) tells it what the JVM printed before dying.
"""

from __future__ import annotations

import re
import time
from typing import Any

SPARK_OOM_EXIT = 52  # org.apache.spark.util.SparkExitCode.OOM
OOM_LINE = re.compile(r"java\.lang\.OutOfMemoryError:?\s*([^\r\n]*)")
# The last OutOfMemoryError the JVM printed (set by millpond.spark.console's relay).
jvm_oom: list[str] = []


def note_console_line(line: str) -> bool:
    """Remember an ``OutOfMemoryError`` in a line of the JVM's console; True if it was one."""
    found = OOM_LINE.search(line)
    if found is None:
        return False
    jvm_oom.append(found.group(1).strip() or "OutOfMemoryError")
    del jvm_oom[:-1]
    return True


def _texts(exc: BaseException) -> list[str]:
    """The messages of ``exc`` and its causes (a ``str()`` that fails is skipped)."""
    texts: list[str] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        texts.append(type(e).__name__)
        for get in (str, lambda x: str(getattr(x, "java_exception", "") or "")):
            try:
                texts.append(get(e))
            except Exception:  # Py4JJavaError's str() asks the (maybe dead) JVM
                pass
        todo += [e.__cause__, e.__context__]
    return texts


def _jvm_exit(wait_s: float = 5.0) -> int | None:
    """The exit code of the JVM millpond launched, if it has exited (waits a little)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    deadline = time.monotonic() + wait_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    code: int | None = proc.poll()
    return code


def explain(exc: BaseException, driver_memory: str, master: str | None) -> str | None:
    """One line naming what ran out of memory and the option to raise, or None if ``exc``
    is not Spark running out of memory."""
    text = "\n".join(_texts(exc))
    local = master is None or master.startswith("local")
    raise_driver = (f"raise --driver-memory (spark.driver.memory, now {driver_memory}); "
                    "under spark-submit, its --driver-memory")
    if "maxResultSize" in text:
        return ("Spark ran out of memory: a task's result is over spark.driver.maxResultSize; "
                "raise it with --spark-conf spark.driver.maxResultSize=2g (and "
                f"--driver-memory, now {driver_memory}, above it)")
    oom = OOM_LINE.search(text)
    died = any(s in text for s in ("Answer from Java side is empty", "Connection refused",
                                   "Py4JNetworkError", "ConnectionRefusedError"))
    if oom is None and died:
        if jvm_oom or _jvm_exit() == SPARK_OOM_EXIT:
            what = jvm_oom[-1] if jvm_oom else "OutOfMemoryError"
            return (f"Spark's driver JVM ran out of memory (java.lang.OutOfMemoryError: {what}) "
                    f"and exited; {raise_driver}")
        return None
    if oom is not None:
        what = oom.group(1).strip() or "OutOfMemoryError"
        if local or "executor driver" in text:
            return (f"Spark ran out of memory in the driver JVM, which runs the tasks with "
                    f"master {master or 'local[*]'} (java.lang.OutOfMemoryError: {what}); "
                    f"{raise_driver}")
        return (f"Spark ran out of memory in an executor (java.lang.OutOfMemoryError: {what}); "
                "raise --spark-conf spark.executor.memory=... (or spark-submit's "
                "--executor-memory)")
    if "SparkOutOfMemoryError" in text or "Unable to acquire" in text:
        return ("Spark could not get execution memory for a task (SparkOutOfMemoryError); "
                f"{raise_driver if local else 'raise spark.executor.memory'}, or raise "
                "--shuffle-partitions so each task holds less")
    if "Python worker exited unexpectedly" in text and ("MemoryError" in text
                                                        or "Killed" in text
                                                        or "signal 9" in text):
        return ("a Spark Python worker ran out of memory (or was killed for it); give the "
                "machine more memory or raise --shuffle-partitions so each task holds less "
                "(spark.executor.pyspark.memory caps a worker)")
    return None


def forget() -> None:
    """Forget what the console reported (a new JVM)."""
    jvm_oom.clear()


def spark_memory_error(exc: BaseException, settings: Any) -> str | None:
    """:func:`explain` with a command's :class:`~millpond.spark.session.SparkSettings`."""
    conf = dict(getattr(settings, "conf", {}) or {})
    memory = conf.get("spark.driver.memory", getattr(settings, "driver_memory", "1g"))
    return explain(exc, memory, getattr(settings, "master", None))
