"""Write the compatibility fixture: a real job's topics and local state, made by this code.

    python -m tests.compat.make_fixture --out tests/compat/data/v0_1

Starts a private broker (``millpond dev kafka`` on free ports, its own data directory), and
drives the ``millpond`` CLI as a user would: ``topics create``, then ``run`` of
:class:`tests.compat.job.CountSum` (two RocksDB stores, each with a changelog; 3 partitions,
effectively-once, ``task.commit.ms=500``) while three waves of input arrive, each waited for
until the job checkpointed it, then SIGTERM (a clean stop), then a fourth wave and a
``run --bounded``. Then it dumps into ``--out``:

* ``job.properties``: the job's config, with ``${MILLPOND_COMPAT_BOOTSTRAP}`` and
  ``${MILLPOND_COMPAT_STATE_DIR}`` where the broker and the state directory go;
* ``topics.json``: per topic (input, both changelogs, the checkpoint topic) its partition
  count, the configs set on it, and per partition its low and high watermarks;
* ``topics/<topic>.jsonl``: every record of the topic, per partition in offset order, with
  offset, timestamp, key and value (base64; null for none) and headers;
* ``state.tar.gz``: the job's local state directory (``<job>/<store>/partition-N`` with
  the RocksDB files and ``OFFSET``, the ``.checkpoint`` directories, lock files) exactly as
  the job left it;
* ``expected.json``: the final state per store, partition and key, computed from the input
  alone (:mod:`tests.compat.reference`) and checked equal to what ``millpond store dump``
  shows, plus the raw bytes ``store dump --raw`` showed;
* ``checkpoint_show.json``: what ``millpond checkpoint show --format json`` printed;
* ``fixture.json``: how and with what it was made, and what its topics look like (the
  offsets that commit markers take).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from tests.compat import reference
from tests.kafka_util import MILLPOND, REPO, OutputLines, read_topic

JOB = "compat-fixture"
INPUT = f"{JOB}-input"
CHANGELOGS = {"counts": f"{JOB}-counts-changelog", "sums": f"{JOB}-sums-changelog"}
CHECKPOINT = f"__millpond_checkpoint_{JOB}_1"
TOPICS = [INPUT, CHANGELOGS["counts"], CHANGELOGS["sums"], CHECKPOINT]
BOOTSTRAP_VAR = "${MILLPOND_COMPAT_BOOTSTRAP}"
STATE_VAR = "${MILLPOND_COMPAT_STATE_DIR}"

PROPERTIES = f"""\
# The compatibility fixture's job (tests/compat/make_fixture.py wrote it; the test fills in
# the two ${{...}} placeholders).
job.name={JOB}
task.class=tests.compat.job.CountSum
task.inputs=kafka.{INPUT}
task.commit.ms=500
task.processing.guarantee=effectively-once
job.logged.store.base.dir={STATE_VAR}

systems.kafka.bootstrap.servers={BOOTSTRAP_VAR}
systems.kafka.samza.key.serde=string
systems.kafka.samza.msg.serde=json

stores.counts.factory=rocksdb
stores.counts.key.serde=string
stores.counts.msg.serde=json
stores.counts.changelog=kafka.{CHANGELOGS["counts"]}
stores.counts.changelog.kafka.min.compaction.lag.ms=3600000

stores.sums.factory=org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory
stores.sums.key.serde=string
stores.sums.msg.serde=long
stores.sums.changelog=kafka.{CHANGELOGS["sums"]}
"""

# (first seq, count, users reset at the end of the wave); the first three go to a running
# job, the fourth to a `run --bounded`. user-5 and user-13 end deleted (tombstones last).
WAVES: list[tuple[int, int, tuple[str, ...]]] = [
    (0, 180, ("user-3",)),
    (180, 180, ("user-10",)),
    (360, 180, ()),
    (540, 150, ("user-5", "user-13")),
]
NEXT_SEQ = 690  # the first sequence number after the fixture's input


def fill(template: str, bootstrap: str, state_dir: Path) -> str:
    """The properties with the placeholders filled in."""
    return template.replace(BOOTSTRAP_VAR, bootstrap).replace(STATE_VAR, str(state_dir))


def cli(*args: str, timeout: float = 120) -> str:
    """``millpond <args>`` in the repository; its stdout; fails loudly."""
    out = subprocess.run([MILLPOND, *args], cwd=REPO, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"millpond {' '.join(args)} failed ({out.returncode}):\n"
                         f"{out.stdout}\n{out.stderr}")
    return out.stdout


def free_port_pair() -> int:
    """A port P with P and P + 1 free (the dev broker's controller listens on P + 1)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise SystemExit("no two consecutive free ports")


def produce(bootstrap: str, msgs: Iterable[reference.Message]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    n = 0
    for m in msgs:
        producer.produce(INPUT, key=m.key.encode(), value=m.encoded(), partition=m.partition)
        n += 1
    assert producer.flush(60) == 0, "input not delivered"
    return n


def input_ends(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-fixture-ends"})
    try:
        return {p: int(consumer.get_watermark_offsets(TopicPartition(INPUT, p), timeout=30)[1])
                for p in range(reference.PARTITIONS)}
    finally:
        consumer.close()


def checkpointed_inputs(config: Path) -> dict[int, int]:
    shown = json.loads(cli("checkpoint", "show", "--config", str(config), "--format", "json"))
    return {int(ckpt["partition"]): int(ckpt["inputs"].get(INPUT, -1)) for ckpt in shown.values()}


def wait_checkpointed(config: Path, ends: dict[int, int], timeout: float = 90) -> None:
    """Wait until every task's checkpoint says it consumed its partition up to ``ends``."""
    deadline = time.monotonic() + timeout
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        seen = checkpointed_inputs(config)
        if all(seen.get(p, -1) >= end for p, end in ends.items()):
            return
        time.sleep(0.5)
    raise SystemExit(f"the job did not checkpoint input up to {ends} in {timeout} s: {seen}")


def run_live(config: Path, bootstrap: str, waves: list[tuple[int, int, tuple[str, ...]]]) -> None:
    """A running job (no --bounded) fed ``waves``, each checkpointed before the next; SIGTERM."""
    proc = subprocess.Popen([MILLPOND, "run", "--config", str(config)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = OutputLines(proc)
    try:
        out.wait_for("every task ready",
                     lambda lines: sum(" ready: restored " in x for x in lines)
                     >= reference.PARTITIONS, timeout=90)
        for first, count, resets in waves:
            produce(bootstrap, reference.messages(first, count, resets=resets))
            wait_checkpointed(config, input_ends(bootstrap))
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    log = out.text()
    if code != 0:
        raise SystemExit(f"the job exited {code}:\n{log[-4000:]}")
    print(log[-2000:], file=sys.stderr)


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def topic_info(bootstrap: str, topic: str) -> dict[str, Any]:
    """Partition count, configs set on the topic, and watermarks per partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=30).topics[topic]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    config = {name: e.value for name, e in sorted(entries.items())
              if getattr(e.source, "value", e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-fixture-wm",
                         "isolation.level": "read_uncommitted"})
    try:
        marks = {str(p): list(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30))
                 for p in sorted(md.partitions)}
    finally:
        consumer.close()
    return {"partitions": len(md.partitions), "config": config, "watermarks": marks}


def dump_topic(bootstrap: str, topic: str, info: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                                          dict[str, Any]]:
    """Every record of ``topic`` (read_uncommitted), checked to be committed, and a summary
    of the offsets per partition that no record has (the transaction markers')."""
    everything = read_topic(bootstrap, topic, "read_uncommitted")
    committed = {(m.partition(), m.offset()) for m in read_topic(bootstrap, topic)}
    aborted = [(m.partition(), m.offset()) for m in everything
               if (m.partition(), m.offset()) not in committed]
    if aborted:
        raise SystemExit(f"{topic}: records of aborted transactions at {aborted[:10]}: "
                         "the test's replay only makes committed transactions")
    rows = []
    for m in sorted(everything, key=lambda m: (m.partition(), m.offset())):
        kind, ts = m.timestamp()
        rows.append({"partition": m.partition(), "offset": m.offset(),
                     "timestamp": ts, "timestamp_type": kind,
                     "key": b64(m.key()), "value": b64(m.value()),
                     "headers": [[k, b64(v)] for k, v in (m.headers() or [])]})
    summary: dict[str, Any] = {}
    for p, (low, high) in info["watermarks"].items():
        offsets = [r["offset"] for r in rows if r["partition"] == int(p)]
        present = set(offsets)
        holes = [o for o in range(low, high) if o not in present]
        summary[p] = {"records": len(offsets), "low": low, "high": high,
                      "offsets_without_record": len(holes),
                      "largest_run_without_record": _longest_run(holes)}
    return rows, summary


def _longest_run(holes: list[int]) -> int:
    best = run = 0
    prev = None
    for o in holes:
        run = run + 1 if prev is not None and o == prev + 1 else 1
        best = max(best, run)
        prev = o
    return best


def tar_state(state_dir: Path, out: Path) -> None:
    """The state directory as the job left it (hard links kept as hard links)."""
    with tarfile.open(out, "w:gz", compresslevel=9) as tar:
        for path in sorted(state_dir.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(state_dir)), recursive=False)


def store_dump(config: Path, store: str, raw: bool) -> dict[str, dict[str, Any]]:
    args = ["store", "dump", "--config", str(config), "--store", store] + (["--raw"] if raw else [])
    out: dict[str, dict[str, Any]] = {}
    for line in cli(*args).splitlines():
        row = json.loads(line)
        out.setdefault(str(row["partition"]), {})[row["key"]] = row["value"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep-work", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "topics").mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="millpond-compat-"))
    port = free_port_pair()
    kafka = [MILLPOND, "dev", "kafka", "--port", str(port), "--data-dir", str(work / "kafka")]
    subprocess.run([*kafka, "start"], cwd=REPO, check=True, timeout=180)
    try:
        bootstrap = f"127.0.0.1:{port}"
        state_dir = work / "state"
        (out / "job.properties").write_text(PROPERTIES)
        config = work / "job.properties"
        config.write_text(fill(PROPERTIES, bootstrap, state_dir))

        cli("topics", "create", "--config", str(config), "--partitions",
            str(reference.PARTITIONS))
        run_live(config, bootstrap, WAVES[:3])
        first, count, resets = WAVES[3]
        produce(bootstrap, reference.messages(first, count, resets=resets))
        bounded = subprocess.run([MILLPOND, "run", "--config", str(config), "--bounded"],
                                 cwd=REPO, capture_output=True, text=True, timeout=120)
        if bounded.returncode != 0:
            raise SystemExit(f"run --bounded exited {bounded.returncode}:\n{bounded.stderr[-4000:]}")
        print(bounded.stderr[-2000:], file=sys.stderr)

        # The state directory exactly as the job left it, before any tool opens a store.
        tar_state(state_dir, out / "state.tar.gz")

        topics: dict[str, Any] = {}
        summaries: dict[str, Any] = {}
        inputs: list[tuple[int, dict[str, Any]]] = []
        for topic in TOPICS:
            info = topic_info(bootstrap, topic)
            rows, summaries[topic] = dump_topic(bootstrap, topic, info)
            topics[topic] = info
            with open(out / "topics" / f"{topic}.jsonl", "w") as fh:
                for row in rows:
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
            if topic == INPUT:
                inputs = [(r["partition"], json.loads(base64.b64decode(r["value"])))
                          for r in rows]
        (out / "topics.json").write_text(json.dumps(topics, indent=2, sort_keys=True) + "\n")

        expected = reference.compute(inputs)
        produced = {store: store_dump(config, store, raw=False) for store in CHANGELOGS}
        if produced != expected:
            raise SystemExit(f"the job's state differs from the reference:\n{produced}\n"
                             f"!=\n{expected}")
        raw = {store: store_dump(config, store, raw=True) for store in CHANGELOGS}
        (out / "expected.json").write_text(json.dumps(
            {"state": expected, "raw": raw, "next_seq": NEXT_SEQ}, indent=2, sort_keys=True)
            + "\n")
        (out / "checkpoint_show.json").write_text(
            cli("checkpoint", "show", "--config", str(config), "--format", "json"))

        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
        versions = subprocess.run(
            [sys.executable, "-c", "import confluent_kafka, rocksdict, millpond; "
             "print(millpond.__version__, confluent_kafka.version()[0], "
             "confluent_kafka.libversion()[0], getattr(rocksdict, '__version__', '?'))"],
            capture_output=True, text=True).stdout.split()
        (out / "fixture.json").write_text(json.dumps({
            "made_by": "python -m tests.compat.make_fixture",
            "git_commit": commit,
            "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "millpond": versions[0] if versions else "?",
            "confluent_kafka": versions[1:2], "librdkafka": versions[2:3],
            "rocksdict": versions[3:4], "python": platform.python_version(),
            "kafka": "4.1.1 (millpond dev kafka)",
            "job": JOB, "input": INPUT, "changelogs": CHANGELOGS, "checkpoint_topic": CHECKPOINT,
            "waves": WAVES, "next_seq": NEXT_SEQ,
            "how": "3 waves to a running job, each waited for until checkpointed, SIGTERM; "
                   "then the 4th wave and `millpond run --bounded`",
            "offsets": summaries,
        }, indent=2) + "\n")
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"fixture written to {out}: {size:,} bytes", file=sys.stderr)
    finally:
        subprocess.run([*kafka, "stop"], cwd=REPO, timeout=120)
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
