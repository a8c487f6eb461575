"""``millpond spark bootstrap`` on a real broker with real Spark: a job starts from batch state.

Acceptance (issue 17): a Parquet file of 100k users -> bootstrap the count job's store -> run
the job on new input (produced with the Java client's default partitioner) with a SIGKILL in
the middle -> final counts = bootstrapped + new, exactly, under effectively-once and
exactly-once. Plus the refusals (a job that has run, a running job, --unique duplicates) and
--replace (exactly the new state, input offsets kept, a local store at an older offset
replays the tail).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from millpond.config import Config
from tests.kafka_util import (
    MILLPOND,
    REPO,
    OutputLines,
    checkpoint_history,
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    millpond,
    read_topic,
    ready_lines,
    run_job,
    write_properties,
)
from tests.spark.test_cli import SPARK_ARGS, SPARK_TIMEOUT

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 4


def _users_parquet(spark: Any, path: Path, users: int, seed: int) -> dict[str, int]:
    """A Parquet file of ``users`` rows (user_id, views, name); returns user -> views."""
    rng = random.Random(seed)
    rows = [(f"user-{i}", rng.randint(1, 50), f"name-{i % 97}") for i in range(users)]
    spark.createDataFrame(rows, "user_id string, views long, name string") \
        .coalesce(2).write.mode("overwrite").parquet(str(path))
    return {u: v for u, v, _ in rows}


def _produce_views(bootstrap: str, topic: str, n: int, users: int, seed: int) -> Counter[str]:
    """``n`` JSON page views keyed by user, placed by librdkafka's murmur2_random: the Java
    client's default partitioner (so each lands where bootstrap put the user's state)."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "partitioner": "murmur2_random"})
    errors: list[str] = []
    expected: Counter[str] = Counter()
    for i in range(n):
        user = f"user-{rng.randrange(users)}"
        producer.produce(topic, key=user.encode(), value=json.dumps({"user_id": user, "i": i}),
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        expected[user] += 1
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors
    return expected


def _start(conf: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], OutputLines]:
    proc = subprocess.Popen([MILLPOND, "run", "--config", str(conf), "--bounded"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env})
    return proc, OutputLines(proc)


def _inputs_committed(bootstrap: str, job: str, source: str) -> int:
    try:
        history = checkpoint_history(bootstrap, job)
    except Exception:
        return 0
    return sum(offs[-1].get(source, 0) for offs in history.values() if offs)


@pytest.mark.parametrize("guarantee", ["effectively-once", "exactly-once"])
def test_bootstrap_100k_users_then_count_with_a_sigkill(
    guarantee: str, spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    from millpond.spark.bootstrap import bootstrap

    users = 100_000
    source, job = topic_name("in"), topic_name("job")
    seed = 17 if guarantee == "exactly-once" else 71
    start = time.monotonic()
    views = _users_parquet(spark, tmp_path / "users.parquet", users, seed)
    create_topic(kafka_bootstrap, source, PARTITIONS)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, job, source, tmp_path / "state",
        **{"task.class": "tests.jobs.counting.SlowCounter",
           "task.processing.guarantee": guarantee, "task.commit.ms": 300}))

    result = bootstrap(Config.load(conf), "counts", tmp_path / "users.parquet", "parquet",
                       "user_id", ["views"], spark=spark)
    doc = result.to_dict()
    assert (doc["rows"], doc["keys"], doc["records"], doc["duplicates"]) == (users, users,
                                                                               users, 0)
    assert doc["mode"] == "new" and doc["records_per_second"] > 0
    bootstrapped = time.monotonic() - start

    # 1/5 of the new views go to users the bootstrap never saw.
    new = _produce_views(kafka_bootstrap, source, 20_000, users + users // 4, seed)
    proc, out = _start(conf, {"MILLPOND_TEST_DELAY": "0.0002"})
    try:
        out.wait_for("every task ready", lambda ls: len(ready_lines("".join(ls))) >= PARTITIONS,
                     timeout=120)
        deadline = time.monotonic() + 120
        while _inputs_committed(kafka_bootstrap, job, source) == 0:
            assert proc.poll() is None, out.text()[-3000:]
            assert time.monotonic() < deadline, "no commit within 120 s"
            time.sleep(0.2)
        time.sleep(0.5)
        assert proc.poll() is None, "the job finished before the kill: give it more input"
    finally:
        proc.kill()  # SIGKILL, mid-run
        proc.wait(30)
    first = ready_lines(out.text())
    # Every task restored its share of the bootstrap, and started its input at 0.
    assert sum(restored for _, restored, _ in first[:PARTITIONS]) == users, first
    assert all(inputs.get(source, 0) == 0 for _, _, inputs in first[:PARTITIONS]), first
    killed_at = _inputs_committed(kafka_bootstrap, job, source)
    assert 0 < killed_at < sum(new.values())

    final = run_job(conf, "--bounded", timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    state = dump_store(conf, "counts")
    expected = Counter(views)
    expected.update(new)
    wrong = {u: (state.get(u), n) for u, n in expected.items() if state.get(u) != n}
    assert not wrong and len(state) == len(expected), (len(wrong), list(wrong.items())[:5])
    print(f"{guarantee}: bootstrap {bootstrapped:.1f}s, {result.records_per_second:,.0f} rec/s; "
          f"killed after {killed_at} of {sum(new.values())} inputs committed")


def _small_job(kafka_bootstrap: str, topic_name: Callable[[str], str], root: Path,
               **extra: Any) -> tuple[Path, str, str]:
    """A count job on 2 partitions without static membership: a stopped process leaves the
    group at once (a static member would count as live until its session times out)."""
    source, job = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    props = counting_job(kafka_bootstrap, job, source, root / "state", **extra)
    del props["systems.kafka.consumer.group.instance.id"]
    conf = write_properties(root / "job.properties", props)
    return conf, source, job


def test_refuses_a_job_that_has_run_or_is_running(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Both refusals come before Spark starts: the command line answers in seconds."""
    conf, source, job = _small_job(kafka_bootstrap, topic_name, tmp_path)
    data = tmp_path / "users.json"
    data.write_text("".join(json.dumps({"user_id": f"u{i}", "views": i}) + "\n"
                            for i in range(10)))
    args = ["spark", "bootstrap", "--config", str(conf), "--store", "counts", "--source",
            str(data), "--format", "json", "--key", "user_id", "--value", "views"]

    _produce_views(kafka_bootstrap, source, 200, 20, 1)
    proc = subprocess.Popen([MILLPOND, "run", "--config", str(conf)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = OutputLines(proc)
    try:
        out.wait_for("tasks ready", lambda ls: len(ready_lines("".join(ls))) >= 2, timeout=60)
        running = millpond(*args, timeout=120)
        # The job has run only once it committed its input (and so wrote its changelog): a
        # SIGTERM before its first fetch would leave the changelog empty.
        deadline = time.monotonic() + 60
        while _committed_inputs(kafka_bootstrap, job, source) < 200:
            assert time.monotonic() < deadline, "the job did not commit its 200 inputs"
            time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(30)
    assert running.returncode == 2, running.stdout + running.stderr
    assert "live members" in running.stderr and f"{job}-1" in running.stderr

    ran = millpond(*args, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"job {job} has run" in ran.stderr and "--replace" in ran.stderr
    assert "task checkpoint(s)" in ran.stderr and "is not empty" in ran.stderr


def _committed_inputs(bootstrap: str, job: str, source: str) -> int:
    """Input messages the job's latest checkpoints cover, over its tasks."""
    return sum(records[-1][1].get(source, 0)
               for records in checkpoint_records(bootstrap, job).values() if records)


def test_unique_refuses_duplicates_and_writes_nothing(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from millpond.spark.bootstrap import bootstrap
    from millpond.spark.errors import BootstrapError

    conf, _, job = _small_job(kafka_bootstrap, topic_name, tmp_path)
    data = tmp_path / "users.csv"
    rows = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5), ("a", 6)]
    data.write_text("user_id,views\n" + "".join(f"{u},{v}\n" for u, v in rows))
    config = Config.load(conf)
    with pytest.raises(BootstrapError) as refused:
        bootstrap(config, "counts", data, "csv", "user_id", ["views"], unique=True, spark=spark)
    message = str(refused.value)
    assert "2 key(s) appear in more than one row (3 extra rows)" in message, message
    assert "'a' (3 rows)" in message and "'b' (2 rows)" in message, message
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
    assert f"{job}-counts-changelog" not in topics  # refused before anything was created

    # Without --unique the last row of each key wins, in file order; --rocksdb-dirs writes
    # store directories at the checkpointed offsets, which the tasks adopt as they are.
    result = bootstrap(config, "counts", data, "csv", "user_id", ["views"],
                       rocksdb_dirs=True, spark=spark)
    assert (result.rows, result.keys, result.duplicates) == (6, 3, 3)
    assert len(result.rocksdb_dirs) == 2
    for p, d in enumerate(result.rocksdb_dirs):
        offset = json.loads((Path(d) / "OFFSET").read_text())["offset"]
        assert offset == result.partitions[p].checkpoint
    assert dump_store(conf, "counts") == {"a": 6, "b": 5, "c": 4}


def test_replace_holds_exactly_the_new_state_and_keeps_input_offsets(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from millpond.spark.bootstrap import bootstrap

    conf, source, job = _small_job(kafka_bootstrap, topic_name, tmp_path,
                                   **{"task.processing.guarantee": "effectively-once"})
    config = Config.load(conf)
    old = tmp_path / "old.json"
    old.write_text("".join(json.dumps({"user_id": f"user-{i}", "views": 100}) + "\n"
                           for i in range(300)))
    report = tmp_path / "report.json"
    done = millpond("spark", "bootstrap", "--config", str(conf), "--store", "counts",
                    "--source", str(old), "--format", "json", "--key", "user_id", "--value",
                    "views", "--report", str(report), *SPARK_ARGS, timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    stats = json.loads(done.stdout)
    assert stats == json.loads(report.read_text())
    assert (stats["mode"], stats["rows"], stats["keys"], stats["records"]) == ("new", 300, 300,
                                                                               300)
    assert sum(p["keys"] for p in stats["partitions"].values()) == 300
    assert stats["records_per_second"] > 0 and stats["topic"] == f"{job}-counts-changelog"
    first = _produce_views(kafka_bootstrap, source, 2000, 400, 5)
    assert run_job(conf, "--bounded").returncode == 0  # local stores, input offsets committed
    before = checkpoint_history(kafka_bootstrap, job)
    inputs = {task: offs[-1] for task, offs in before.items()}
    assert sum(o[source] for o in inputs.values()) == sum(first.values())

    # The new state: users 200..499 (0..199 must disappear, 300..499 are new to the store).
    new = {f"user-{i}": i for i in range(200, 500)}
    data = tmp_path / "new.json"
    data.write_text("".join(json.dumps({"user_id": u, "views": v}) + "\n" for u, v in new.items()))
    args = ["spark", "bootstrap", "--config", str(conf), "--store", "counts", "--source",
            str(data), "--format", "json", "--key", "user_id", "--value", "views"]
    refused = millpond(*args)
    assert refused.returncode == 2 and "has run" in refused.stderr, refused.stderr
    replaced = bootstrap(config, "counts", data, "json", "user_id", ["views"], replace=True,
                         spark=spark)
    stale = {f"user-{i}" for i in range(200)} | {u for u in first if u not in new}
    assert replaced.mode == "replace" and replaced.keys == len(new)
    tombstones = sum(p.tombstones for p in replaced.partitions.values())
    assert tombstones == len(stale) and replaced.records == len(new) + len(stale)

    after = checkpoint_history(kafka_bootstrap, job)
    assert {task: offs[-1] for task, offs in after.items()} == inputs  # input offsets kept
    # The local stores are at older changelog offsets: they replay the tail and end exact.
    restored = millpond("restore", "--config", str(conf))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert dump_store(conf, "counts") == new
    more = _produce_views(kafka_bootstrap, source, 1000, 500, 6)
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    expected = Counter(new)
    expected.update(more)
    assert dump_store(conf, "counts") == dict(expected)
    # The changelog, replayed from its start, is exactly that state too.
    latest: dict[str, int | None] = {}
    for msg in read_topic(kafka_bootstrap, f"{job}-counts-changelog"):
        latest[msg.key().decode()] = None if msg.value() is None else json.loads(msg.value())
    assert {k: v for k, v in latest.items() if v is not None} == dict(expected)


def test_source_option_reaches_the_spark_reader(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """`bootstrap --source-option k=v` passes a reader option (docs/operations/spark.md): a
    ``;``-separated CSV read with ``--source-option delimiter=;`` bootstraps every row; the
    same file without it has no ``user_id`` column (Spark reads one ``user_id;views``
    column) and is refused naming the key, with nothing written."""
    conf, _, job = _small_job(kafka_bootstrap, topic_name, tmp_path)
    data = tmp_path / "users.csv"
    rows = {"a": 1, "b": 22, "c": 333}
    data.write_text("user_id;views\n" + "".join(f"{u};{v}\n" for u, v in rows.items()))
    common = ["spark", "bootstrap", "--config", str(conf), "--store", "counts",
              "--source", str(data), "--format", "csv", "--key", "user_id",
              "--value", "views", *SPARK_ARGS]

    refused = millpond(*common, timeout=SPARK_TIMEOUT)
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    assert "user_id" in refused.stderr.strip().splitlines()[-1], refused.stderr[-3000:]
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
    assert f"{job}-counts-changelog" not in topics

    done = millpond(*common, "--source-option", "delimiter=;", "--rocksdb-dirs",
                    timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    doc, _ = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{"))
    assert (doc["rows"], doc["keys"]) == (3, 3), doc
    assert dump_store(conf, "counts") == rows
