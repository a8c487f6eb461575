"""The CLI's one error boundary: every command given a bad config, a missing topic or a missing
store exits 2 (a config or user error) with one ``Error:`` line that says what is wrong and
where, and no traceback; an unreachable broker is a runtime failure (exit 1), one line too.

Each command runs as a user runs it (the installed console script, a subprocess). A bad config
must name its file and line; a missing store its name; a missing topic the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import counting_job, create_topic, millpond, write_properties

STORE = ("--store", "counts")
# Every command that takes a job config, with the other arguments it requires.
COMMANDS: dict[str, tuple[str, ...]] = {
    "run": ("run", "--bounded"),
    "restore": ("restore",),
    "checkpoint show": ("checkpoint", "show"),
    "checkpoint set": ("checkpoint", "set", "--partition", "0", "--offset", "in=0"),
    "checkpoint drop": ("checkpoint", "drop", "--partition", "0", "--offset", "0"),
    "changelog describe": ("changelog", "describe"),
    "store get": ("store", "get", *STORE, "--partition", "0", "u1"),
    "store range": ("store", "range", *STORE, "--partition", "0"),
    "store dump": ("store", "dump", *STORE),
    "status": ("status",),
    "topics create": ("topics", "create", "--partitions", "1"),
    "backup list": ("backup", "list"),
    "backup verify": ("backup", "verify"),
    "spark rebuild": ("spark", "rebuild", *STORE),
    "spark audit": ("spark", "audit", *STORE),
    "spark snapshot": ("spark", "snapshot", *STORE, "--out", "/nonexistent/snap",
                       "--checkpoint-location", "/nonexistent/ckpt"),
    "spark bootstrap": ("spark", "bootstrap", *STORE, "--key", "k", "--source", "/nonexistent",
                        "--format", "json", "--value", "v"),
    "spark rescale": ("spark", "rescale", "--partitions", "2"),
}


def _run(*args: str) -> tuple[int, list[str]]:
    done = millpond(*args, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, lines


def assert_one_error_line(code: int, lines: list[str], *needles: str, logs: bool = False) -> None:
    """Exit 2 and one ``Error:`` line containing every needle; ``logs``: the job's own log
    lines (``millpond run`` logs at INFO) may come before it."""
    errors = [line for line in lines if line.startswith("Error:")]
    assert code == 2, lines
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    assert logs or len(lines) == 1, lines
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_config_is_one_line_naming_file_and_line(command: str, tmp_path: Path) -> None:
    conf = tmp_path / "job.properties"
    conf.write_text("job.name=bad\ntask.class=tests.jobs.counting.Counter\n"
                    "task.commit.ms=soon\ntask.inputs=kafka.in\n")
    code, lines = _run(*COMMANDS[command], "--config", str(conf))
    assert_one_error_line(code, lines, f"{conf}:3", "task.commit.ms", logs=command == "run")


@pytest.mark.kafka
@pytest.mark.parametrize("command", ["restore", "changelog describe", "store get", "store dump",
                                     "spark rebuild", "spark audit"])
def test_a_missing_store_is_one_line_naming_it(
    command: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name = topic_name("job")
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, topic_name("in"), tmp_path / "state"))
    args = [a if a != "counts" else "no-such-store" for a in COMMANDS[command]]
    if "--store" not in args:
        args += ["--store", "no-such-store"]
    code, lines = _run(*args, "--config", str(conf))
    assert_one_error_line(code, lines, "no-such-store")


@pytest.mark.kafka
@pytest.mark.parametrize("command, what", [
    ("run", "input"), ("restore", "changelog"), ("checkpoint set", "input"), ("status", "never"),
])
def test_a_missing_topic_is_one_line_naming_it(
    command: str, what: str, kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    if what != "input":
        create_topic(kafka_bootstrap, source, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state"))
    args = [a if a != "in=0" else f"{source}=0" for a in COMMANDS[command]]
    code, lines = _run(*args, "--config", str(conf))
    needle = {"input": source, "changelog": f"{name}-counts-changelog", "never": name}[what]
    assert_one_error_line(code, lines, needle, logs=command == "run")


def test_commands_that_read_kafka_say_broker_unreachable(tmp_path: Path) -> None:
    """With no broker at the configured address, the commands that read Kafka retry for a
    bounded time, then exit 1 (a runtime failure) with one line saying the broker is
    unreachable (run with
    --wait-timeout; by default it waits for Kafka). They run side by side: the bound is
    30 s each."""
    import socket
    import subprocess
    import time

    from tests.kafka_util import MILLPOND, REPO

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{unused.getsockname()[1]}"
    conf = write_properties(tmp_path / "job.properties",
                            counting_job(closed, "gone", "in", tmp_path / "state"))
    commands = [("status",), ("checkpoint", "show"), ("changelog", "describe"),
                ("restore",), ("run", "--wait-timeout", "3")]
    began = time.monotonic()
    procs = [subprocess.Popen([MILLPOND, *cmd, "--config", str(conf)], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for cmd in commands]
    for cmd, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=90)
        errors = [line for line in err.splitlines() if line.startswith("Error:")]
        assert proc.returncode == 1, (cmd, out, err)
        assert len(errors) == 1 and "unreachable" in errors[0] and closed in errors[0], (cmd, err)
        assert "Traceback" not in err, (cmd, err)
    assert time.monotonic() - began < 75
