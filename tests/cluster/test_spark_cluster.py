"""The spark commands on a real Spark standalone cluster, through spark-submit.

A master and two workers run as their own JVMs (``millpond.dev.spark``, from the jars the
pyspark package ships); each command runs as ``spark-submit --master spark://...
"$(millpond spark submit-script)" <command> ...`` with executors on both workers, and its
results are compared with the same command in local mode, or with the job's own stores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millpond.dev.kafka import free_port
from tests.conftest import unavailable
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.cluster]

TIMEOUT = 300
SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
# Executors that fit two 1-core, 1 GiB workers; the driver listens on loopback only.
EXECUTOR_CONF = {"spark.executor.memory": "512m", "spark.executor.cores": "1",
                 "spark.cores.max": "2", "spark.driver.host": "127.0.0.1",
                 "spark.driver.bindAddress": "127.0.0.1", "spark.sql.shuffle.partitions": "2",
                 "spark.pyspark.python": sys.executable}
LOCAL_ARGS = ["--master", "local[2]", "--shuffle-partitions", "2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The cluster as a user starts it: ``millpond dev spark start``, then ``status``; at the
    end ``stop``, after which ``status`` says it is not running and no daemon is left
    (docs/reference/cli.md's ``dev spark`` commands, tested here where a cluster runs)."""
    from millpond.dev.procs import alive
    from millpond.dev.spark import LocalSparkCluster

    if not Path(SPARK_SUBMIT).exists():
        unavailable(f"spark-submit is not installed beside {sys.executable}")
    data, port = tmp_path_factory.mktemp("spark-cluster"), free_port()
    cli = ("dev", "spark", "--data-dir", str(data), "--port", str(port), "--workers", "2",
           "--worker-memory", "1g")
    started = millpond(*cli, "start", "--timeout", "180", timeout=240)
    cluster = LocalSparkCluster(data, workers=2, worker_cores=1, worker_memory="1g",
                                port=port)  # the ports the CLI saved in the data dir
    pids: list[int] = []
    if started.returncode != 0:
        cluster.stop()
        unavailable(f"the Spark cluster did not start: {started.stdout}{started.stderr}")
    try:
        assert started.stdout.strip().splitlines()[-1] == f"spark://127.0.0.1:{port}", \
            started.stdout
        status = millpond("dev", "spark", "--data-dir", str(data), "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.startswith(
            f"running master=spark://127.0.0.1:{port} workers=2 web="), status.stdout
        pids = cluster.status().pids
        assert len(pids) == 3, pids  # a master and two workers
        yield cluster
    finally:
        stopped = millpond("dev", "spark", "--data-dir", str(data), "stop", timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        after = millpond("dev", "spark", "--data-dir", str(data), "status")
        assert after.returncode == 1 and after.stdout.startswith("not running"), after.stdout
        assert not [p for p in pids if alive(p)], pids


def submit(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``spark-submit`` one millpond spark command to the cluster."""
    jars = millpond("spark", "jars", timeout=TIMEOUT)
    assert jars.returncode == 0, jars.stderr
    script = millpond("spark", "submit-script").stdout.strip()
    conf = [a for k, v in EXECUTOR_CONF.items() for a in ("--conf", f"{k}={v}")]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [SPARK_SUBMIT, "--master", cluster.master_url, "--deploy-mode", "client",
         "--driver-memory", "512m", "--jars", jars.stdout.strip(), *conf, script, *args],
        capture_output=True, text=True, timeout=TIMEOUT, env=env)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    # the report is the JSON document; py4j may log a line after it at exit
    doc, _ = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{"))
    return dict(doc)


def _executor_dirs(cluster: Any) -> list[list[Path]]:
    """Per worker, the executor directories of every application it ran."""
    return [sorted(w.glob("app-*/*")) for w in cluster.worker_dirs()]


def test_rebuild_audit_snapshot_on_a_standalone_cluster(
    cluster: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 3000, 200, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state")
    conf = write_properties(tmp_path / "job.properties", props)
    assert run_job(conf, "--bounded").returncode == 0
    assert dump_store(conf, "counts") == dict(expected)
    common = ["--config", str(conf), "--store", "counts"]

    # rebuild: the same statistics as in local mode, and RocksDB directories written by the
    # executors that a task adopts with exactly the job's state
    adopt = tmp_path / "adopt"
    on_cluster = _json(submit(cluster, "rebuild", *common, "--at-checkpoint",
                              "--rocksdb-base-dir", str(adopt)))
    local = _json(millpond("spark", "rebuild", *common, "--at-checkpoint", "--rocksdb-base-dir",
                           str(tmp_path / "adopt-local"), *LOCAL_ARGS, timeout=TIMEOUT))
    assert sorted(on_cluster.pop("rocksdb_dirs")) == [
        str(adopt / name / "counts" / f"partition-{p}") for p in (0, 1)]
    for doc in (on_cluster, local):
        for varying in ("seconds", "records_per_second", "rocksdb_dirs"):
            doc.pop(varying, None)
    assert on_cluster == local
    assert on_cluster["keys"] == len(expected)
    adopted = write_properties(tmp_path / "adopted.properties", {
        **props, "job.logged.store.base.dir": str(adopt)})
    assert dump_store(adopted, "counts") == dict(expected)

    # audit of the job's own store directories: every key matches, as in local mode
    audited = _json(submit(cluster, "audit", *common, "--at-checkpoint"))
    assert audited["ok"] is True
    assert audited["totals"] == {"matching": len(expected), "missing": 0, "extra": 0,
                                 "differing": 0}

    # snapshot (Structured Streaming, available-now): the same state as the rebuild
    snapshot = _json(submit(cluster, "snapshot", *common, "--available-now",
                            "--out", str(tmp_path / "versions"),
                            "--checkpoint-location", str(tmp_path / "stream-ckpt")))
    local_snapshot = _json(millpond(
        "spark", "snapshot", *common, "--available-now", "--out", str(tmp_path / "versions-l"),
        "--checkpoint-location", str(tmp_path / "stream-ckpt-l"), *LOCAL_ARGS, timeout=TIMEOUT))
    assert snapshot["keys"] == local_snapshot["keys"] == len(expected)
    assert snapshot["as_of"] == local_snapshot["as_of"]

    # the executors really ran on the workers, on both of them
    per_worker = _executor_dirs(cluster)
    assert all(per_worker), f"executor directories per worker: {per_worker}"
    apps = cluster.master_state()["completedapps"]
    assert len(apps) >= 3 and all(a["state"] == "FINISHED" for a in apps), apps


def test_rebuild_and_audit_of_a_dataflows_stores_on_a_standalone_cluster(
    cluster: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """The stores of a dataflow app (app.class, compiled by every command): ``page-counts``
    after a key_by (JSON keys, partitioned by the internal topic) and ``user-stats`` on the
    source's keys (dumped beside it). rebuild of the re-keyed store gives RocksDB directories
    holding the job's state; audit finds its changelog equal to the live store."""
    from tests.streams.test_tooling import APP, PARTITIONS, expected_state, produce_views

    source, name = topic_name("views"), topic_name("app")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    expected = expected_state(produce_views(kafka_bootstrap, source, 0, 3000))
    props = {"job.name": name, "app.class": APP, "views.topic": source,
             "systems.kafka.bootstrap.servers": kafka_bootstrap,
             "systems.kafka.samza.key.serde": "string", "systems.kafka.samza.msg.serde": "json",
             "job.logged.store.base.dir": str(tmp_path / "state"),
             # a changelog record per update (7 pages, 3000 views), tuning the compiled store
             "stores.page-counts.object.cache.size": 0}
    conf = write_properties(tmp_path / "app.properties", props)
    ran = run_job(conf, "--bounded", timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for store in ("page-counts", "user-stats"):
        assert dump_store(conf, store) == expected[store]

    # rebuild of the re-keyed store: its changelog is the job's, its state the job's
    adopt = tmp_path / "adopt"
    rebuilt = _json(submit(cluster, "rebuild", "--config", str(conf), "--store", "page-counts",
                           "--at-checkpoint", "--rocksdb-base-dir", str(adopt)))
    assert (rebuilt["topic"], rebuilt["keys"]) == (f"{name}-1-page-counts-changelog",
                                                   len(expected["page-counts"]))
    assert rebuilt["records_read"] >= 3000  # the last record of each key wins
    assert sorted(rebuilt["rocksdb_dirs"]) == [
        str(adopt / name / "page-counts" / f"partition-{p}") for p in range(PARTITIONS)]
    adopted = write_properties(tmp_path / "adopted.properties", {
        **props, "job.logged.store.base.dir": str(adopt)})
    assert dump_store(adopted, "page-counts") == expected["page-counts"]

    # audit: the changelog equals the job's store directories, key for key
    audited = _json(submit(cluster, "audit", "--config", str(conf), "--store", "page-counts",
                           "--at-checkpoint"))
    assert audited["ok"] is True
    assert audited["totals"] == {"matching": len(expected["page-counts"]), "missing": 0,
                                 "extra": 0, "differing": 0}
    assert sorted(audited["partitions"]) == [str(p) for p in range(PARTITIONS)]


def test_bootstrap_on_a_standalone_cluster_then_count(
    cluster: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from collections import Counter

    from confluent_kafka import Producer

    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state")
    del props["systems.kafka.consumer.group.instance.id"]  # stopped = gone from the group
    conf = write_properties(tmp_path / "job.properties", props)
    history = {f"user-{i}": i % 7 + 1 for i in range(2000)}
    lines = tmp_path / "history" / "part-0.json"
    lines.parent.mkdir()
    lines.write_text("".join(json.dumps({"user_id": u, "views": v}) + "\n"
                             for u, v in history.items()))

    done = _json(submit(cluster, "bootstrap", "--config", str(conf), "--store", "counts",
                        "--source", str(lines.parent), "--format", "json", "--key", "user_id",
                        "--value", "views"))
    assert (done["rows"], done["keys"], done["records"]) == (2000, 2000, 2000)

    # new input placed as the Java client places it, counted on top of the bootstrap
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    new: Counter[str] = Counter()
    for i in range(3000):
        user = f"user-{(i * 37) % 2500}"  # 500 users the bootstrap never saw
        producer.produce(source, key=user.encode(), value=json.dumps({"user_id": user}))
        new[user] += 1
    assert producer.flush(30) == 0
    ran = run_job(conf, "--bounded", timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    expected = Counter(history)
    expected.update(new)
    assert dump_store(conf, "counts") == dict(expected)


def test_rescale_on_a_standalone_cluster_then_count(
    cluster: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from tests.spark.test_bootstrap import _produce_views
    from tests.spark.test_rescale import _changelog_state, _grow, _job, _misplaced

    conf, source, _ = _job(kafka_bootstrap, topic_name, tmp_path, 2)
    expected = _produce_views(kafka_bootstrap, source, 3000, 300, 5)
    assert run_job(conf, "--bounded", timeout=TIMEOUT).returncode == 0
    _grow(kafka_bootstrap, source, 4)

    doc = _json(submit(cluster, "rescale", "--config", str(conf), "--partitions", "4"))
    gen2 = _changelog_state(kafka_bootstrap, doc["stores"]["counts"]["topic"])
    assert {k: v for (_, k), v in gen2.items()} == dict(expected)
    assert not _misplaced(list(gen2), 4)

    expected.update(_produce_views(kafka_bootstrap, source, 2000, 350, 6))
    ran = run_job(conf, "--bounded", timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)
