"""Bad input and bad config: precise errors, configured skips, nothing committed is lost."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    run_job,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka

VIEW_SCHEMA = {"type": "record", "name": "View", "fields": [{"name": "user_id", "type": "string"}]}
WRONG_SCHEMA = {"type": "record", "name": "Other", "fields": [{"name": "user_id", "type": "long"}]}


def _avro(schema: dict, record: dict) -> bytes:  # type: ignore[type-arg]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def _checkpoint_inputs(conf: Path) -> dict[str, int]:
    shown = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    return json.loads(shown.stdout)["partition-0"]["inputs"]


def test_avro_with_the_wrong_schema_names_the_message(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    good: Counter[str] = Counter()
    for i in range(50):
        user = f"user-{i % 7}"  # 8 or 7 views each: a per-key mistake shows
        producer.produce(source, key=b"k", value=_avro(VIEW_SCHEMA, {"user_id": user}))
        good[user] += 1
    producer.produce(source, key=b"k", value=_avro(WRONG_SCHEMA, {"user_id": 5}))
    producer.flush(30)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s", **{
            f"systems.kafka.streams.{source}.samza.msg.serde": "views",
            "serializers.registry.views.class": "avro",
            "serializers.registry.views.schema": json.dumps(VIEW_SCHEMA),
        }))
    run = run_job(conf, "--bounded")
    assert run.returncode == 1  # a poison record: a runtime failure
    assert f"{source}[0] at offset 50" in run.stderr, run.stderr[-2000:]
    assert _checkpoint_inputs(conf)[source] == 50
    state = dump_store(conf, "counts")
    lost, dup = state_diff(state, good)
    report("Avro with the wrong schema", "1 bad record after 50 good", lost, dup,
           "stopped at offset 50, 50 committed" if state == dict(good) else "DIFF")
    assert state == dict(good), "each user counted once per good record"


def test_value_over_max_message_bytes_stops_before_commit(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    first = produce_users(kafka_bootstrap, source, 500, 20, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"big.value.on.user": "user-999"}))
    assert run_job(conf, "--bounded").returncode == 0
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, key=b"user-999", value=json.dumps({"user_id": "user-999"}))
    producer.flush(30)
    produce_users(kafka_bootstrap, source, 100, 20, 1)
    run = run_job(conf, "--bounded")
    assert run.returncode == 1
    assert f"{name}-counts-changelog[0]" in run.stderr and "too large" in run.stderr.lower()
    [error] = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    for named in ("store counts", "stores.counts.drop.large.messages",
                  "stores.counts.changelog.max.message.size.bytes"):
        assert named in error, error
    assert _checkpoint_inputs(conf)[source] == 500, "the last good commit stays"
    assert millpond("restore", "--config", str(conf)).returncode == 0
    state = dump_store(conf, "counts")
    lost, dup = state_diff(state, first)
    report("value over message.max.bytes", "2 MB store value after a commit", lost, dup,
           "stopped before commit, earlier commit intact" if state == dict(first) else "DIFF")
    assert state == dict(first), "restarted state is the committed one"


CONFIG_MISTAKES = ("unknown task.class", "typo in a store key", "missing serde")


def test_bad_config_is_named(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """A job that has committed state is restarted with each config mistake in turn: each
    refused with file:line before it touches anything (checkpoint and store as they were);
    the corrected config then processes the rest exactly once."""
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 1)
    good = counting_job(kafka_bootstrap, topic_name("job"), source, tmp_path / "s")
    expected = produce_users(kafka_bootstrap, source, 300, 10, 1)
    conf = write_properties(tmp_path / "job.properties", good)
    first = run_job(conf, "--bounded")
    assert first.returncode == 0, first.stderr[-2000:]
    expected += produce_users(kafka_bootstrap, source, 200, 10, 1)
    committed = _checkpoint_inputs(conf)
    assert committed == {source: 300}

    for case in CONFIG_MISTAKES:
        props = dict(good)
        if case == "unknown task.class":
            props["task.class"] = "tests.jobs.counting.NoSuchTask"
        elif case == "typo in a store key":
            props["stores.counts.key.serd"] = props.pop("stores.counts.key.serde")
        else:
            props["stores.counts.msg.serde"] = "jsn"
        bad = write_properties(tmp_path / "bad.properties", props)
        line = 1 + [k for k in props].index(
            {"unknown task.class": "task.class", "typo in a store key": "stores.counts.key.serd",
             "missing serde": "stores.counts.msg.serde"}[case])
        run = run_job(bad, "--bounded")
        assert run.returncode == 2, case  # a config error
        assert "Traceback" not in run.stderr, run.stderr
        if case == "unknown task.class":
            assert f"bad.properties:{line}" in run.stderr and "NoSuchTask" in run.stderr
        elif case == "typo in a store key":
            assert "stores.counts.key.serde" in run.stderr
            assert f"bad.properties:{line}" in run.stderr and "key.serde" in run.stderr
        else:
            assert f"bad.properties:{line}" in run.stderr and "jsn" in run.stderr
        assert _checkpoint_inputs(conf) == committed, f"{case}: the refused run moved it"
        assert sum(dump_store(conf, "counts").values()) == 300, case

    fixed = run_job(conf, "--bounded")
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    lost, dup = state_diff(dump_store(conf, "counts"), expected)
    for case in CONFIG_MISTAKES:
        report(f"config: {case}", "a job with 300 msgs committed restarted with the mistake; "
               "then 200 more msgs with the config fixed", lost, dup,
               "refused with file:line, checkpoint and store untouched; exact after the fix"
               if (lost, dup) == (0, 0) else "DIFF")
    assert (lost, dup) == (0, 0)
