"""State written by an older millpond restores unchanged with this one.

``data/v0_1`` was written by ``python -m tests.compat.make_fixture`` with millpond 0.1.0
(``fixture.json`` names the commit): every record of a job's input, both changelogs and its
checkpoint topic, and its local state directory as the job left it. Each test puts the
topics back on the test broker with the offsets they had, then drives only the ``millpond``
command line (the contract: the CLI, the config keys, the topic and file formats; never
millpond's modules, whose paths may move) and checks the result against the fixture's
expected state, which was computed from the input alone.

The old code wrote changelog and checkpoint records in Kafka transactions, one per task and
commit, so each commit's marker takes an offset no record has: in the fixture every such
hole is exactly one offset wide and every transactional partition ends with one. The replay
reproduces them by committing a transaction of its own wherever the next record's offset
skips one, and asserts afterwards that every record landed at exactly its fixture offset
(else the test would prove nothing: the checkpoint names changelog offsets).
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import struct
import tarfile
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat import reference
from tests.kafka_util import millpond, read_topic, ready_lines, run_job, task_summaries

DATA = Path(__file__).parent / "data" / "v0_1"
TIMEOUT = 60.0

Record = dict[str, Any]


@dataclass(frozen=True)
class Fixture:
    """The fixture's files, parsed."""

    properties: str
    meta: dict[str, Any]
    topics: dict[str, dict[str, Any]]  # topic -> partitions, config, watermarks
    records: dict[str, list[Record]]  # topic -> records, per partition in offset order
    expected: dict[str, Any]
    checkpoint_show: dict[str, Any]

    @property
    def job(self) -> str:
        return str(self.meta["job"])

    @property
    def input(self) -> str:
        return str(self.meta["input"])

    @property
    def changelogs(self) -> dict[str, str]:
        return dict(self.meta["changelogs"])

    @property
    def checkpoint_topic(self) -> str:
        return str(self.meta["checkpoint_topic"])

    def partition_records(self, topic: str, partition: int) -> list[Record]:
        return [r for r in self.records[topic] if r["partition"] == partition]

    def last_checkpoints(self) -> dict[str, dict[str, Any]]:
        """The newest checkpoint record per task, decoded from the fixture's topic."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records[self.checkpoint_topic]:
            out[base64.b64decode(r["key"]).decode()] = json.loads(base64.b64decode(r["value"]))
        return out


@cache
def fixture() -> Fixture:
    topics = json.loads((DATA / "topics.json").read_text())
    records = {t: [json.loads(line) for line in (DATA / "topics" / f"{t}.jsonl").open()]
               for t in topics}
    return Fixture(
        properties=(DATA / "job.properties").read_text(),
        meta=json.loads((DATA / "fixture.json").read_text()),
        topics=topics, records=records,
        expected=json.loads((DATA / "expected.json").read_text()),
        checkpoint_show=json.loads((DATA / "checkpoint_show.json").read_text()),
    )


# -- putting the topics back ------------------------------------------------------------------


def transactions(records: list[Record], low: int, high: int, where: str,
                 ) -> tuple[bool, list[list[Record]]]:
    """How to write one partition's records so each lands at its offset: (transactional,
    batches). A partition whose offsets run without a hole to its end is written plainly
    (one batch). Otherwise each one-offset hole, and the one offset past the last record,
    is a transaction's commit marker: a batch is one transaction. Anything else (a wider
    hole, records not starting at the partition's start) cannot be reproduced: fail."""
    if not records:
        assert low == high == 0, f"{where}: no records but watermarks {low}..{high}"
        return False, []
    assert low == 0 and records[0]["offset"] == 0, (
        f"{where}: starts at {records[0]['offset']} (low {low}); a new topic starts at 0")
    batches: list[list[Record]] = [[records[0]]]
    for prev, rec in zip(records, records[1:], strict=False):
        gap = rec["offset"] - prev["offset"] - 1
        assert gap in (0, 1), f"{where}: {gap} offsets without a record before {rec['offset']}"
        if gap:
            batches.append([])
        batches[-1].append(rec)
    tail = high - records[-1]["offset"] - 1
    assert tail in (0, 1), f"{where}: {tail} offsets without a record at the end"
    transactional = tail == 1 or len(batches) > 1
    assert not (transactional and tail == 0), f"{where}: the last transaction has no marker"
    return transactional, batches


def _decode(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def recreate_topics(bootstrap: str, fx: Fixture) -> None:
    """Delete the fixture's topics if an earlier test left them, and create them anew with the
    fixture's partition counts and configs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = list(fx.topics)
    for name, future in admin.delete_topics(names, operation_timeout=30).items():
        try:
            future.result(timeout=TIMEOUT)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise AssertionError(f"deleting {name}: {exc}") from exc
    deadline = time.monotonic() + TIMEOUT
    pending = set(names)
    while pending:
        new = [NewTopic(t, fx.topics[t]["partitions"], 1, config=fx.topics[t]["config"])
               for t in sorted(pending)]
        for name, future in admin.create_topics(new).items():
            try:
                future.result(timeout=TIMEOUT)
                pending.discard(name)
            except KafkaException as exc:
                # a deletion the broker has not finished yet
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise AssertionError(f"creating {name}: {exc}") from exc
        if pending:
            assert time.monotonic() < deadline, f"topics {pending} still exist after deletion"
            time.sleep(0.5)


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[str, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex}",
                         "isolation.level": "read_uncommitted"})
    try:
        return {str(p): list(consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=TIMEOUT))
                for p in range(partitions)}
    finally:
        consumer.close()


def replay(bootstrap: str, fx: Fixture) -> None:
    """Recreate the fixture's topics and write every record back at its fixture offset."""
    recreate_topics(bootstrap, fx)
    # Timestamps as recorded, moved back as a whole if the fixture's are ahead of this
    # machine's clock (a broker refuses CreateTime stamps more than an hour in the future).
    newest = max(r["timestamp"] for rs in fx.records.values() for r in rs)
    shift = min(0, int(time.time() * 1000) - 60_000 - newest)
    delivered: list[tuple[str, int, int, int]] = []  # (topic, partition, wanted, got)
    errors: list[str] = []

    def report(wanted: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.topic()}[{msg.partition()}]@{wanted}: {err}")
            else:
                delivered.append((msg.topic(), msg.partition(), wanted, msg.offset()))
        return on_delivery

    def send(producer: Producer, topic: str, rec: Record) -> None:
        headers = [(k, _decode(v)) for k, v in rec["headers"]] or None
        producer.produce(topic, key=_decode(rec["key"]), value=_decode(rec["value"]),
                         partition=rec["partition"], timestamp=rec["timestamp"] + shift,
                         headers=headers, on_delivery=report(rec["offset"]))

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    txn = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                    "transactional.id": f"compat-replay-{uuid.uuid4().hex}"})
    txn.init_transactions(TIMEOUT)
    commits = 0
    for topic, info in fx.topics.items():
        for p in range(info["partitions"]):
            low, high = info["watermarks"][str(p)]
            transactional, batches = transactions(fx.partition_records(topic, p), low, high,
                                                  f"{topic}[{p}]")
            for batch in batches:
                if transactional:
                    txn.begin_transaction()
                    for rec in batch:
                        send(txn, topic, rec)
                    txn.commit_transaction(TIMEOUT)  # its marker takes the next offset
                    commits += 1
                else:
                    for rec in batch:
                        send(plain, topic, rec)
                    assert plain.flush(TIMEOUT) == 0
    assert not errors, errors
    assert commits > 0

    # Every record where the fixture had it, and every partition ends where it ended.
    wrong = [(t, p, w, g) for t, p, w, g in delivered if w != g]
    assert not wrong, f"replayed records at other offsets than the fixture's: {wrong[:10]}"
    assert len(delivered) == sum(len(rs) for rs in fx.records.values())
    for topic, info in fx.topics.items():
        assert watermarks(bootstrap, topic, info["partitions"]) == info["watermarks"], topic
        back = sorted(read_topic(bootstrap, topic, "read_uncommitted"),
                      key=lambda m: (m.partition(), m.offset()))
        assert [(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1] - shift,
                 list(m.headers() or [])) for m in back] == [
            (r["partition"], r["offset"], _decode(r["key"]), _decode(r["value"]),
             r["timestamp"], [(k, _decode(v)) for k, v in r["headers"]])
            for r in fx.records[topic]], topic


# -- the job's config and local state ---------------------------------------------------------


def write_config(path: Path, bootstrap: str, state_dir: Path) -> Path:
    """The fixture's job.properties with its placeholders filled in."""
    text = (fixture().properties.replace("${MILLPOND_COMPAT_BOOTSTRAP}", bootstrap)
            .replace("${MILLPOND_COMPAT_STATE_DIR}", str(state_dir)))
    assert "${MILLPOND_COMPAT_" not in text
    path.write_text(text)
    return path


def unpack_state(dest: Path) -> Path:
    """The fixture's local state directory, unpacked as the old job left it."""
    dest.mkdir(parents=True)
    with tarfile.open(DATA / "state.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return dest


def cli(*args: str) -> str:
    out = millpond(*args)
    assert out.returncode == 0, f"millpond {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def dump(config: Path, store: str, raw: bool = False) -> dict[str, dict[str, Any]]:
    """``millpond store dump`` of every partition: partition (as str) -> key -> value."""
    out: dict[str, dict[str, Any]] = {}
    for line in cli("store", "dump", "--config", str(config), "--store", store,
                    *(["--raw"] if raw else []),
                    *[a for p in range(reference.PARTITIONS) for a in ("--partition", str(p))],
                    ).splitlines():
        row = json.loads(line)
        out.setdefault(str(row["partition"]), {})[row["key"]] = row["value"]
    return out


def encoded_state(state: dict[str, Any]) -> dict[str, dict[str, dict[str, str]]]:
    """The bytes each store holds for ``state``, written out independently of millpond: keys
    UTF-8; counts compact JSON; sums 8 bytes big-endian with the sign bit flipped (millpond's
    ``long``), as base64, the way ``store dump --raw`` prints them."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "counts": {p: {b64(k.encode()): b64(json.dumps(v).encode()) for k, v in kv.items()}
                   for p, kv in state["counts"].items()},
        "sums": {p: {b64(k.encode()): b64(struct.pack(">Q", v + (1 << 63)))
                     for k, v in kv.items()} for p, kv in state["sums"].items()},
    }


def offset_files(state_dir: Path, job: str) -> dict[str, str]:
    """The text of every OFFSET file under the job's state directory, by relative path."""
    return {str(f.relative_to(state_dir)): f.read_text()
            for f in sorted((state_dir / job).rglob("OFFSET"))}


def produce_more(bootstrap: str, fx: Fixture) -> list[reference.Message]:
    """New input after the fixture's: 180 messages and a reset of user-8; users 5 and 13,
    deleted in the fixture, come back."""
    msgs = list(reference.messages(fx.expected["next_seq"], 180, resets=("user-8",)))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for m in msgs:
        producer.produce(fx.input, key=m.key.encode(), value=m.encoded(), partition=m.partition)
    assert producer.flush(TIMEOUT) == 0
    return msgs


@pytest.fixture
def fx(kafka_bootstrap: str) -> Fixture:
    """The fixture, its topics put back on the test broker at their offsets."""
    data = fixture()
    replay(kafka_bootstrap, data)
    return data


# -- the tests --------------------------------------------------------------------------------


def test_fixture_is_what_its_generator_says() -> None:
    """The expected state is the input's, independently of the old job: recomputed here
    from the fixture's input records; the raw bytes the old `store dump --raw` printed are
    the serdes' documented layouts; and the fixture's checkpoints name the whole input."""
    fx = fixture()
    inputs = [(r["partition"], json.loads(base64.b64decode(r["value"])))
              for r in fx.records[fx.input]]
    assert reference.compute(inputs) == fx.expected["state"]
    assert encoded_state(fx.expected["state"]) == fx.expected["raw"]
    # the fixture ends with two users deleted (their changelogs' last records are tombstones)
    assert "user-5" not in fx.expected["state"]["counts"]["2"]
    assert "user-13" not in fx.expected["state"]["sums"]["1"]
    ends = {p: fx.topics[fx.input]["watermarks"][str(p)][1] for p in range(reference.PARTITIONS)}
    assert {c["partition"]: c["inputs"][fx.input] for c in fx.last_checkpoints().values()} == ends


def test_old_store_files_read_unchanged(tmp_path: Path) -> None:
    """`store get|dump` read the old RocksDB directories as they are (no broker needed: the
    partitions are named, so no topic is looked up)."""
    fx = fixture()
    state_dir = unpack_state(tmp_path / "state")
    config = write_config(tmp_path / "job.properties", "127.0.0.1:9", state_dir)
    for store in fx.changelogs:
        assert dump(config, store) == fx.expected["state"][store], store
        assert dump(config, store, raw=True) == fx.expected["raw"][store], store
    got = [json.loads(line) for line in cli(
        "store", "get", "--config", str(config), "--store", "sums", "--partition", "2",
        "user-2", "user-5").splitlines()]
    assert got == [
        {"partition": 2, "key": "user-2", "value": fx.expected["state"]["sums"]["2"]["user-2"]},
        {"partition": 2, "key": "user-5", "value": None},  # deleted: a tombstone was last
    ]


@pytest.mark.kafka
def test_restore_rebuilds_old_stores_from_old_changelogs(
    fx: Fixture, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """a) `millpond restore` with no local state replays every old changelog record up to the
    old checkpoint; the stores then hold exactly the expected state, in the same bytes, and
    the OFFSET files it writes are the old job's, byte for byte."""
    state_dir = tmp_path / "state"
    config = write_config(tmp_path / "job.properties", kafka_bootstrap, state_dir)
    table = cli("restore", "--config", str(config)).splitlines()
    rows = {(cols[0], int(cols[1])): (int(cols[2]), cols[7])
            for cols in (line.split() for line in table[1:])}
    checkpoints = fx.last_checkpoints()
    wanted = {}
    for store, topic in fx.changelogs.items():
        for p in range(reference.PARTITIONS):
            last = checkpoints[f"partition-{p}"]["changelogs"][store]
            n = sum(1 for r in fx.partition_records(topic, p) if r["offset"] <= last)
            wanted[(store, p)] = (n, "full")
    assert rows == wanted, "\n".join(table)

    for store in fx.changelogs:
        assert dump(config, store) == fx.expected["state"][store], store
        assert dump(config, store, raw=True) == fx.expected["raw"][store], store

    old = unpack_state(tmp_path / "old")
    assert offset_files(state_dir, fx.job) == offset_files(old, fx.job)


@pytest.mark.kafka
def test_checkpoint_show_reports_old_checkpoints(
    fx: Fixture, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """c) `checkpoint show` prints what the old one printed for the same topic, which is the
    newest checkpoint record of each task; `changelog describe` shows the old changelogs'
    offsets and the checkpointed ones."""
    config = write_config(tmp_path / "job.properties", kafka_bootstrap, tmp_path / "state")
    shown = json.loads(cli("checkpoint", "show", "--config", str(config), "--format", "json"))
    assert shown == fx.checkpoint_show
    assert shown == fx.last_checkpoints()
    table = cli("checkpoint", "show", "--config", str(config)).splitlines()
    for task, ckpt in fx.checkpoint_show.items():
        line = next(x for x in table if x.startswith(task + " "))
        assert f"{fx.input}={ckpt['inputs'][fx.input]}" in line, line
        for store, offset in ckpt["changelogs"].items():
            assert f"{store}={offset}" in line, line

    described = json.loads(cli("changelog", "describe", "--config", str(config),
                               "--format", "json"))
    got = {(r["store"], r["partition"]): (r["topic"], r["low"], r["high"], r["checkpointed"],
                                           r["local_offset"]) for r in described["partitions"]}
    assert got == {
        (store, p): (topic, *fx.topics[topic]["watermarks"][str(p)],
                     fx.checkpoint_show[f"partition-{p}"]["changelogs"][store], None)
        for store, topic in fx.changelogs.items() for p in range(reference.PARTITIONS)}
    for topic in fx.changelogs.values():
        assert described["topics"][topic]["cleanup.policy"] == "compact"


@pytest.mark.kafka
@pytest.mark.parametrize("local", ["as-left", "checkpoint-dirs-only", "none"])
def test_job_resumes_from_old_state(
    fx: Fixture, kafka_bootstrap: str, tmp_path: Path, local: str
) -> None:
    """b) The job resumes where the old one stopped: with the old state directory as it was
    left (its live stores are used: nothing restored), with only the old last-commit
    checkpoint directories (copied back: nothing restored), or with no local state (every
    old changelog record restored). Each task starts at its old checkpoint's input offsets,
    processes only the new input, and the state is the old state plus the new input, exactly;
    the new changelog records follow the old ones."""
    state_dir = tmp_path / "state"
    if local == "none":
        state_dir.mkdir()
    else:
        unpack_state(state_dir)
    if local == "checkpoint-dirs-only":
        for store in fx.changelogs:
            for p in range(reference.PARTITIONS):
                shutil.rmtree(state_dir / fx.job / store / f"partition-{p}")
    config = write_config(tmp_path / "job.properties", kafka_bootstrap, state_dir)
    new = produce_more(kafka_bootstrap, fx)

    run = run_job(config, "--bounded", timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    log = run.stdout + run.stderr

    old_ckpt = fx.last_checkpoints()
    changelog_records = {p: sum(len(fx.partition_records(t, p)) for t in fx.changelogs.values())
                         for p in range(reference.PARTITIONS)}
    ready = {task: (restored, inputs) for task, restored, inputs in ready_lines(log)}
    assert ready == {
        f"partition-{p}": (changelog_records[p] if local == "none" else 0,
                           old_ckpt[f"partition-{p}"]["inputs"])
        for p in range(reference.PARTITIONS)}, log[-4000:]
    new_per_partition = {p: sum(1 for m in new if m.partition == p)
                         for p in range(reference.PARTITIONS)}
    assert {p: processed for p, (processed, _) in task_summaries(log).items()} == \
        new_per_partition, log[-4000:]

    expected = reference.compute([(m.partition, m.value) for m in new],
                                 copy.deepcopy(fx.expected["state"]))
    for store in fx.changelogs:
        assert dump(config, store) == expected[store], store
    assert encoded_state(expected) == {s: dump(config, s, raw=True) for s in fx.changelogs}

    shown = json.loads(cli("checkpoint", "show", "--config", str(config), "--format", "json"))
    changelogs = {topic: read_topic(kafka_bootstrap, topic) for topic in fx.changelogs.values()}
    for p in range(reference.PARTITIONS):
        ckpt = shown[f"partition-{p}"]
        old = old_ckpt[f"partition-{p}"]
        assert ckpt["inputs"] == {fx.input: old["inputs"][fx.input] + new_per_partition[p]}
        for store, topic in fx.changelogs.items():
            # the old records stay where they were; the new ones start at the old end
            mine = sorted(m.offset() for m in changelogs[topic] if m.partition() == p)
            old_offsets = [r["offset"] for r in fx.partition_records(topic, p)]
            old_end = fx.topics[topic]["watermarks"][str(p)][1]
            assert mine[:len(old_offsets)] == old_offsets
            assert mine[len(old_offsets)] == old_end
            assert ckpt["changelogs"][store] == mine[-1]

