"""The console of the Spark JVM that millpond starts: off stdout, without start-up noise.

PySpark starts its JVM (``spark-submit``) with this process's stdout and stderr. Whatever the
JVM prints to stdout then lands in the middle of a command's result (the first time the
Kafka connector is resolved, Ivy prints ``:: loading settings :: file = ...`` there, before
``millpond spark audit``'s JSON), and its start-up notices go to the terminal.

:func:`launch_jvm` starts the JVM as PySpark would, but with both streams on a pipe that
:func:`relay` reads: lines that ask nothing of the user (the JVM's incubator-module notice,
Ivy's resolution report) are logged at DEBUG, Ivy's resolution is summed up in one INFO line,
and every other line (Spark's warnings and errors, Python worker tracebacks) goes to stderr
as it is, except stack frames once an ``OutOfMemoryError`` was printed:
:mod:`millpond.spark.oom` notes it, and the command ends with one line saying which memory
to raise.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger("millpond.spark")

# Printed on every start, and asking nothing of the user.
NOISE = (
    "WARNING: Using incubator modules",  # the JVM: Spark 4 loads jdk.incubator.vector
    "Using Spark's default log4j profile",  # (these three only without a log4j2 config)
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel",
)
# Ivy resolving the Kafka connector (spark.jars.packages; the first run on a machine). Its
# problems (":: problems summary ::", "module not found", "UNRESOLVED DEPENDENCIES") are not
# among these and are shown.
IVY = (
    ":: loading settings ::", "Ivy Default Cache set to:", "The jars for the packages stored in:",
    ":: resolving dependencies ::", ":: resolution report ::", ":: retrieving ::",
    "\tconfs: [", "\tfound ", "\t-----", "\t|", "downloading ", "\tdownloading ",
    "\t[SUCCESSFUL ]",
)
IVY_ENDS = (" added as a dependency",)
IVY_DONE = re.compile(r"^\t(\d+) artifacts copied, (\d+) already retrieved")


def classify(line: str) -> str:
    """``"noise"``, ``"ivy"``, ``"ivy-done"`` (Ivy's last line) or ``"show"``."""
    text = line.rstrip("\r\n")
    if text.startswith(NOISE):
        return "noise"
    if IVY_DONE.match(text):
        return "ivy-done"
    if text.startswith(IVY) or text.endswith(IVY_ENDS):
        return "ivy"
    return "show"


def relay(fd: int, show: Callable[[str], None] | None = None) -> None:
    """Read the JVM's console from ``fd`` to its end, passing on what :func:`classify` shows
    (to stderr unless ``show`` is given)."""
    from millpond.spark import oom

    frames_quiet = False  # after an OutOfMemoryError (the CLI says what to raise instead)
    with os.fdopen(fd, "rb") as pipe:
        for raw in pipe:
            line = raw.decode("utf-8", "replace")
            kind = classify(line)
            if oom.note_console_line(line) or frames_quiet:
                # Its headline lines stay; the stack frames of it and of the failures it
                # causes next (an aborted job, a lost JVM) are at DEBUG.
                if line.startswith(("\tat ", "\t... ")):
                    kind = "noise"
                frames_quiet = True
            if kind == "show":
                if show is not None:
                    show(line)
                else:
                    sys.stderr.write(line)
                    sys.stderr.flush()
            elif kind == "ivy-done":
                log.info("resolved the Kafka connector's jars with Ivy (%s)", line.strip())
            else:
                log.debug("spark jvm: %s", line.rstrip())


def launch_jvm(conf: Mapping[str, str]) -> bool:
    """Start Spark's JVM for a session with ``conf`` (``spark.master`` and ``spark.app.name``
    included) with its console through :func:`relay`; False if a JVM runs already.

    Spark settings that only apply at launch (``spark.driver.memory``, ``spark.jars*``,
    ``spark.driver.extraJavaOptions``) are taken from ``conf``, exactly as PySpark's own
    launch would; the session built next attaches to this JVM."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return False
    from millpond.spark import oom

    oom.forget()  # what an earlier JVM printed is not this one's
    spark_conf = SparkConf()  # no JVM yet: settings are kept in Python for the launch
    for key, value in conf.items():
        spark_conf.set(key, value)
    read_fd, write_fd = os.pipe()
    reader = threading.Thread(target=relay, args=(read_fd,), name="spark-jvm-console",
                              daemon=True)
    reader.start()
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": write_fd,
                                                           "stderr": write_fd})
    except BaseException:
        os.close(write_fd)
        reader.join(timeout=5)  # the JVM's last lines (why it did not start) come first
        raise
    os.close(write_fd)  # the JVM (and the Python workers it starts) hold the other copy
    SparkContext._ensure_initialized(gateway=gateway)
    return True
