"""Config mistakes as the operator meets them (the installed CLI, a subprocess): a typo in
millpond's namespaces is a ``Warning:`` line naming file:line and the closest key, an
``Error:`` line and exit 2 under job.config.strict=true; a misspelt required key is pointed
at; an int outside its range stops the job at its line; ``store dump`` of a base dir that is
not there is an error, and creates nothing."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_error_boundary import _run, assert_one_error_line
from tests.kafka_util import counting_job, write_properties

CLOSED = "127.0.0.1:1"  # never asked: each command here stops (or finishes) before Kafka


def job(tmp_path: Path, **extra: object) -> Path:
    return write_properties(tmp_path / "job.properties",
                            counting_job(CLOSED, "typos", "in", tmp_path / "state", **extra))


def line_of(path: Path, key: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.startswith(key + "="))


def test_a_typo_warns_with_file_line_and_the_closest_key(tmp_path: Path) -> None:
    conf = job(tmp_path, **{"task.comit.ms": 300})
    code, lines = _run("acls", "--config", str(conf), "--role", "job")
    warned = [line for line in lines if line.startswith("Warning:")]
    assert code == 0, lines
    assert warned == [f"Warning: {conf}:{line_of(conf, 'task.comit.ms')}: task.comit.ms: unknown "
                      "key: neither millpond nor Samza reads it (did you mean task.commit.ms?); "
                      "it is ignored"], lines


def test_strict_refuses_a_typo_before_anything_runs(tmp_path: Path) -> None:
    conf = job(tmp_path, **{"job.config.strict": "true", "task.comit.ms": 300})
    code, lines = _run("run", "--bounded", "--config", str(conf))
    assert_one_error_line(code, lines, f"{conf}:{line_of(conf, 'task.comit.ms')}: task.comit.ms",
                          "did you mean task.commit.ms?", logs=True)
    assert not (tmp_path / "state").exists()


def test_a_key_set_twice_names_both_lines(tmp_path: Path) -> None:
    conf = job(tmp_path)
    conf.write_text(conf.read_text() + "task.inputs=kafka.other\n")
    first, again = 3, len(conf.read_text().splitlines())
    code, lines = _run("acls", "--config", str(conf), "--role", "job")
    assert code == 0, lines
    assert f"Warning: {conf}:{again}: task.inputs is set twice, at {conf}:{first} and " \
           f"{conf}:{again}; the value at {conf}:{again} is used" in lines, lines


def test_a_misspelt_required_key_is_pointed_at(tmp_path: Path) -> None:
    props = counting_job(CLOSED, "typos", "in", tmp_path / "state")
    props["task.inputz"] = props.pop("task.inputs")
    conf = write_properties(tmp_path / "job.properties", props)
    code, lines = _run("run", "--bounded", "--config", str(conf))
    assert_one_error_line(code, lines, f"{conf}:{line_of(conf, 'task.inputz')}: task.inputs: "
                          "is missing", "this line sets task.inputz", logs=True)


def test_a_negative_commit_interval_stops_the_job_at_its_line(tmp_path: Path) -> None:
    conf = job(tmp_path, **{"task.commit.ms": -5})
    code, lines = _run("run", "--bounded", "--config", str(conf))
    assert_one_error_line(code, lines, f"{conf}:{line_of(conf, 'task.commit.ms')}: "
                          "task.commit.ms: must be at least 0, got -5", logs=True)


def test_store_dump_of_a_missing_base_dir_is_an_error(tmp_path: Path) -> None:
    conf = job(tmp_path)
    for command in (("store", "dump", "--store", "counts"),
                    ("store", "get", "--store", "counts", "--partition", "0", "u1")):
        code, lines = _run(*command, "--config", str(conf))
        assert_one_error_line(code, lines, f"job.logged.store.base.dir={tmp_path / 'state'} "
                              "does not exist", f"set at {conf}:")
    assert not (tmp_path / "state").exists()  # looked, created nothing


def test_a_rocksdb_value_out_of_range_stops_the_job_before_kafka(tmp_path: Path) -> None:
    """Checked when the job starts (before Kafka is asked), not when a task opens its store."""
    conf = job(tmp_path, **{"stores.counts.rocksdb.block.size.bytes": 0})
    code, lines = _run("run", "--bounded", "--config", str(conf))
    assert_one_error_line(code, lines, f"{conf}:{line_of(conf, 'stores.counts.rocksdb.block.size.bytes')}",
                          "block.size.bytes", logs=True)
    assert not (tmp_path / "state").exists()
