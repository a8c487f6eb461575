"""User-code and environment errors at start, as the operator meets them (``millpond run``, a
subprocess, against the tests' broker): ``init()``, ``window()`` or ``close()`` raising, an
unconfigured store, an import or syntax error in ``task.class``, a state directory that
cannot be made. Each is one ``Error:`` line naming the task class and method (or the file
and line) and the user's own frame, exit 2; ``--verbose`` adds the traceback; nothing is
committed that the failed run did not finish."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_error_boundary import assert_one_error_line
from tests.kafka_util import (
    MILLPOND,
    REPO,
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka
JOBS = Path(__file__).parents[1] / "jobs" / "faulty.py"


def lines_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def line_no(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def job(kafka_bootstrap: str, topic_name: Callable[[str], str],
        tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    """A counting job over a fresh input of 20 records (1 partition) with ``extra`` keys."""

    def make(**extra: object) -> tuple[Path, str]:
        name, source = topic_name("job"), topic_name("in")
        create_topic(kafka_bootstrap, source, 1)
        produce_users(kafka_bootstrap, source, 20, 4, 1)
        conf = write_properties(tmp_path / "job.properties", counting_job(
            kafka_bootstrap, name, source, tmp_path / "state", **extra))
        return conf, name

    return make


@pytest.mark.parametrize("cls, needles", [
    ("InitRaises", ["tests.jobs.faulty.InitRaises.init() raised ValueError: bad setting",
                    f"(at {JOBS}:{line_no(JOBS, 'raise ValueError')} in check_setting)"]),
    ("WrongStore", ["tests.jobs.faulty.WrongStore.init() raised KeyError",
                    "no store named 'countz' is configured (stores: counts)",
                    f"(at {JOBS}:{line_no(JOBS, 'countz')} in init)"]),
])
def test_init_raising_is_one_line_with_the_users_frame(
        job: Callable[..., tuple[Path, str]], kafka_bootstrap: str, cls: str,
        needles: list[str]) -> None:
    conf, name = job(**{"task.class": f"tests.jobs.faulty.{cls}"})
    done = run_job(conf, "--bounded", timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert_one_error_line(done.returncode, lines_of(done.stderr), *needles, logs=True)
    assert not checkpoint_records(kafka_bootstrap, name)  # it never got to commit


def test_window_raising_names_the_method_and_verbose_shows_the_traceback(
        job: Callable[..., tuple[Path, str]]) -> None:
    conf, _ = job(**{"task.class": "tests.jobs.faulty.WindowRaises", "task.window.ms": 1})
    verbose = subprocess.run([MILLPOND, "-v", "run", "--bounded", "--config", str(conf)],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    needle = (f"tests.jobs.faulty.WindowRaises.window() raised RuntimeError: window went wrong "
              f"(at {JOBS}:{line_no(JOBS, 'window went wrong')} in window)")
    lines = lines_of(verbose.stderr)
    assert verbose.returncode == 2 and lines[-1].startswith("Error: "), lines
    assert needle in lines[-1] and sum(line.startswith("Error:") for line in lines) == 1, lines
    traceback = lines.index("Traceback (most recent call last):")  # -v: printed before it
    assert any("raise RuntimeError" in line for line in lines[traceback:-1]), lines
    assert_counts_exact_after_the_fix(conf)


def assert_counts_exact_after_the_fix(conf: Path) -> None:
    """With the task's code fixed (the plain Counter), a rerun ends with every one of the 20
    input records counted exactly once: the failed runs lost and doubled nothing."""
    text = conf.read_text()
    fixed = "\n".join("task.class=tests.jobs.counting.Counter" if line.startswith("task.class=")
                      else line for line in text.splitlines())
    conf.write_text(fixed + "\n")
    done = run_job(conf, "--bounded", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sum(dump_store(conf, "counts").values()) == 20


def test_close_raising_names_the_method(job: Callable[..., tuple[Path, str]]) -> None:
    conf, _ = job(**{"task.class": "tests.jobs.faulty.CloseRaises"})
    done = run_job(conf, "--bounded", timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert_one_error_line(done.returncode, lines_of(done.stderr),
                          "tests.jobs.faulty.CloseRaises.close() raised OSError: close went "
                          f"wrong (at {JOBS}:{line_no(JOBS, 'close went wrong')} in close)",
                          logs=True)
    assert_counts_exact_after_the_fix(conf)


@pytest.mark.parametrize("source, needle", [
    ("class Broken(:\n    pass\n", "SyntaxError at {path}:1: invalid syntax"),
    ("import no_such_module_anywhere\n", "No module named 'no_such_module_anywhere' "
                                         "(at {path}:1 in <module>)"),
    ("raise RuntimeError('module-level failure')\n",
     "importing usermod raised RuntimeError: module-level failure (at {path}:1 in <module>)"),
])
def test_a_task_module_that_does_not_import_is_one_line_at_its_file_and_line(
        tmp_path: Path, source: str, needle: str) -> None:
    """task.class is imported before Kafka is asked: no broker is needed to see it."""
    module = tmp_path / "code" / "usermod.py"
    module.parent.mkdir()
    module.write_text(source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        "127.0.0.1:1", "imports", "in", tmp_path / "state", **{"task.class": "usermod.Task"}))
    done = run_job(conf, "--bounded", timeout=120, env={"PYTHONPATH": str(module.parent)})
    assert "Traceback" not in done.stderr, done.stderr
    assert_one_error_line(done.returncode, lines_of(done.stderr),
                          f"{conf}:{line_no(conf, 'task.class=')}: task.class=usermod.Task "
                          "cannot be imported", needle.format(path=module), logs=True)


def test_a_state_dir_that_cannot_be_made_is_one_line(
        job: Callable[..., tuple[Path, str]], kafka_bootstrap: str, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state directory's parent should be\n")
    conf, name = job(**{"job.logged.store.base.dir": blocker / "state"})
    done = run_job(conf, "--bounded", timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert_one_error_line(done.returncode, lines_of(done.stderr), "cannot use",
                          str(blocker), "File exists", "job.logged.store.base.dir",
                          logs=True)
    assert blocker.read_text().startswith("a file")  # untouched
    assert not checkpoint_records(kafka_bootstrap, name)


def test_an_unwritable_state_dir_is_one_line(
        job: Callable[..., tuple[Path, str]], kafka_bootstrap: str) -> None:
    """/sys refuses new directories to every user, root included (as a read-only file
    system refuses them): the task cannot make its store there."""
    base = Path("/sys/millpond-state")
    conf, name = job(**{"job.logged.store.base.dir": base})
    done = run_job(conf, "--bounded", timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert_one_error_line(done.returncode, lines_of(done.stderr), f"cannot use {base}",
                          f"task partition-0 keeps its stores under "
                          f"job.logged.store.base.dir={base} ({conf}:", logs=True)
    assert not base.exists() and not checkpoint_records(kafka_bootstrap, name)


def test_the_traceback_is_in_the_debug_log(tmp_path: Path) -> None:
    """Without -v the traceback is not on stderr at INFO, but is in the job's log at DEBUG."""
    module = tmp_path / "code" / "usermod.py"
    module.parent.mkdir()
    module.write_text("raise RuntimeError('module-level failure')\n")
    conf = write_properties(tmp_path / "job.properties", counting_job(
        "127.0.0.1:1", "imports", "in", tmp_path / "state", **{"task.class": "usermod.Task"}))
    done = run_job(conf, "--log-level", "DEBUG", env={"PYTHONPATH": str(module.parent)})
    lines = lines_of(done.stderr)
    assert done.returncode == 2 and lines[-1].startswith("Error: ") and "usermod" in lines[-1]
    assert any("DEBUG millpond.cli:" in line for line in lines), lines
    assert "Traceback (most recent call last):" in lines and \
        f'  File "{module}", line 1, in <module>' in lines, lines
