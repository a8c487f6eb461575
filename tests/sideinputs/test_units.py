"""Side inputs, one layer at a time (no broker): config parsing, the processor, the
read-only view, and when a local side-input store is trusted."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from millpond.api import IncomingMessageEnvelope
from millpond.config import Config, ConfigError, StreamRef
from millpond.serdes.builtins import JsonSerde, StringSerde
from millpond.sideinputs import KeyValueProcessor, ReadOnlyStore, SideInputsContext
from millpond.sideinputs.errors import (
    ReadOnlyStoreError,
    SideInputProcessingError,
    SideInputsConfigError,
)
from millpond.sideinputs.local import distrust, open_store_engine, read_offsets, write_offsets
from millpond.sideinputs.processor import load_processor_class
from millpond.sideinputs.reader import SideInputReader, SideInputStore
from millpond.stores import InMemoryEngine, RocksDbEngine, build_stack

BASE = """job.name=j
stores.p.factory=rocksdb
stores.p.key.serde=string
stores.p.msg.serde=json
"""


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "job.properties"
    path.write_text(text)
    return Config.load(path, env={})


def test_side_inputs_are_parsed_like_task_inputs(tmp_path: Path) -> None:
    cfg = load(tmp_path, BASE + "stores.p.side.inputs=kafka.profiles, extra\n"
               "stores.p.side.inputs.processor.factory=millpond.sideinputs.KeyValueProcessor\n"
               "job.changelog.system=kafka\n").stores["p"]
    assert cfg.side_inputs == (StreamRef("kafka", "profiles"), StreamRef("kafka", "extra"))
    assert cfg.side_inputs_processor == "millpond.sideinputs.KeyValueProcessor"
    assert cfg.changelog is None  # job.changelog.system gives side-input stores none


def test_a_changelog_on_a_side_input_store_is_refused_at_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, BASE + "stores.p.side.inputs=profiles\n"
             "stores.p.side.inputs.processor.factory=x.Y\nstores.p.changelog=kafka.c\n")
    assert str(info.value).startswith(f"{tmp_path / 'job.properties'}:7: stores.p.changelog: ")
    assert "cannot have a changelog" in str(info.value)


@pytest.mark.parametrize(("extra", "line", "key"), [
    ("stores.p.side.inputs=profiles\n", 5, "stores.p.side.inputs"),
    ("stores.p.side.inputs.processor.factory=x.Y\n", 5, "stores.p.side.inputs.processor.factory"),
])
def test_one_key_without_the_other_is_refused(tmp_path: Path, extra: str, line: int,
                                              key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, BASE + extra)
    assert str(info.value).startswith(f"{tmp_path / 'job.properties'}:{line}: {key}: ")


def test_a_processor_that_does_not_import_names_its_line(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + "stores.p.side.inputs=profiles\n"
                  "stores.p.side.inputs.processor.factory=nowhere.Nothing\n")
    with pytest.raises(SideInputsConfigError, match=r"job.properties:6: .*cannot be imported"):
        load_processor_class(config, config.stores["p"])


def _envelope(key: object, value: object) -> IncomingMessageEnvelope:
    return IncomingMessageEnvelope("profiles", 0, 7, key, value)


def test_key_value_processor_decodes_raw_bytes_with_the_store_serdes() -> None:
    processor = KeyValueProcessor()
    processor.init(SideInputsContext("p", 0, None, StringSerde(),  # type: ignore[arg-type]
                                     JsonSerde()))
    store = build_stack("p", InMemoryEngine(), StringSerde(), JsonSerde()).store
    assert list(processor.process(_envelope(b"u1", b'{"zip": "10115"}'), store)) == [
        ("u1", {"zip": "10115"})]
    assert list(processor.process(_envelope("u1", {"zip": 1}), store)) == [("u1", {"zip": 1})]
    assert list(processor.process(_envelope(b"u1", None), store)) == [("u1", None)]  # delete
    assert list(processor.process(_envelope(None, b"{}"), store)) == []


def test_the_task_view_reads_but_refuses_writes() -> None:
    inner = build_stack("p", InMemoryEngine(), StringSerde(), JsonSerde()).store
    inner.put("a", 1)
    view = ReadOnlyStore(inner, "p")
    assert view.get("a") == 1 and view.get_all(["a", "b"]) == {"a": 1}
    with view.all() as it:
        assert list(it) == [("a", 1)]
    for write in (lambda: view.put("a", 2), lambda: view.delete("a"),
                  lambda: view.put_all([("b", 1)]), lambda: view.delete_all(["a"])):
        with pytest.raises(ReadOnlyStoreError, match="filled from its side inputs"):
            write()
    assert inner.get("a") == 1


def test_a_local_store_is_trusted_only_as_checkpointed(tmp_path: Path) -> None:
    live = tmp_path / "partition-0"
    live.mkdir()
    marks = {"profiles": (0, 100)}
    assert distrust(live, {"profiles": 40}, ["profiles"], marks.get) is not None  # no file
    write_offsets(live, "p", 0, {"profiles": 40})
    assert read_offsets(live) == {"profiles": 40}
    assert distrust(live, {"profiles": 40}, ["profiles"], marks.get) is None
    assert "checkpoint says" in (distrust(live, {"profiles": 41}, ["profiles"], marks.get) or "")
    assert distrust(live, {}, ["profiles"], marks.get) is not None
    assert distrust(live, {"profiles": 40}, ["profiles", "more"], marks.get) is not None
    # the topic recreated (now ends below the checkpoint): read again
    assert "now holds" in (distrust(live, {"profiles": 40}, ["profiles"],
                                    {"profiles": (0, 30)}.get) or "")
    # records deleted below the checkpoint: the store is still what it says; the reader
    # applies auto.offset.reset to the gap (tests/sideinputs/test_side_input_gaps.py)
    assert distrust(live, {"profiles": 40}, ["profiles"], {"profiles": (50, 100)}.get) is None
    (live / "SIDE_INPUTS").write_text("garbage")
    assert distrust(live, {"profiles": 40}, ["profiles"], marks.get) is not None


def test_an_untrusted_store_is_wiped_and_read_from_the_start(tmp_path: Path) -> None:
    live = tmp_path / "partition-0"
    engine = RocksDbEngine(live)
    engine.put(b"k", b"v")
    engine.close()
    write_offsets(live, "p", 0, {"profiles": 1})
    marks = {"profiles": (0, 5)}.get
    engine, start = open_store_engine("p", live, {"profiles": 1}, ["profiles"],
                                      lambda: RocksDbEngine(live), marks)
    assert start == {"profiles": 1} and engine.get(b"k") == b"v"  # trusted: kept
    engine.close()
    engine, start = open_store_engine("p", live, {"profiles": 2}, ["profiles"],
                                      lambda: RocksDbEngine(live), marks)
    assert start is None and engine.get(b"k") is None  # not as checkpointed: wiped
    engine.close()


class FakeMessage:
    """Just what the reader reads of a confluent_kafka Message (unit test of one layer)."""

    def __init__(self, offset: int, key: bytes | None = None, value: bytes | None = None,
                 eof: bool = False, partition: int = 0) -> None:
        self._offset, self._key, self._value, self._partition = offset, key, value, partition
        self._error = KafkaError(KafkaError._PARTITION_EOF) if eof else None

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return "profiles"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)

    def headers(self) -> None:
        return None


class Failing:
    def process(self, message: IncomingMessageEnvelope, store: object) -> list[tuple[str, int]]:
        raise ValueError("bad profile")


def _reader(tmp_path: Path, processor: object, positions: int, clean: bool
            ) -> tuple[SideInputReader, SideInputStore]:
    live = tmp_path / "partition-0"
    engine = RocksDbEngine(live)
    stack = build_stack("p", engine, StringSerde(), JsonSerde())
    if clean:
        write_offsets(live, "p", 0, {"profiles": positions})
    s = SideInputStore("p", {"profiles": ("profiles", 0)}, processor,  # type: ignore[arg-type]
                       stack.store, engine,
                       live, {"profiles": positions}, clean=clean)
    return SideInputReader(0, [s], None, lambda t: (None, None)), s  # type: ignore[arg-type]


def test_reader_applies_in_order_skips_what_it_has_and_marks_the_store_dirty(
    tmp_path: Path,
) -> None:
    processor = KeyValueProcessor()
    processor.init(SideInputsContext("p", 0, None, StringSerde(), JsonSerde()))  # type: ignore[arg-type]
    reader, s = _reader(tmp_path, processor, positions=3, clean=True)
    reader._apply([FakeMessage(2, b"old", b"1"),  # before the position: already applied
                   FakeMessage(3, b"a", b"1"), FakeMessage(5, b"b", b"2"),
                   FakeMessage(6, b"a", None)])  # a tombstone deletes
    assert s.positions == {"profiles": 7} and reader.records == 3
    assert read_offsets(s.live) is None  # type: ignore[arg-type]  # dirty: no longer trusted
    with s.store.all() as it:
        assert list(it) == [("b", 2)]
    assert reader.offsets() == {"p": {"profiles": 7}}
    reader.after_commit()
    assert read_offsets(s.live) == {"profiles": 7} and s.clean  # type: ignore[arg-type]
    reader._apply([FakeMessage(9, eof=True)])  # past trailing markers / compaction gaps
    assert s.positions == {"profiles": 9} and s.clean  # nothing applied: still clean
    assert reader.offsets() == {"p": {"profiles": 9}}
    reader.after_commit()
    assert read_offsets(s.live) == {"profiles": 9}  # type: ignore[arg-type]
    s.engine.close()


def test_a_failing_processor_stops_naming_store_topic_and_offset(tmp_path: Path) -> None:
    reader, s = _reader(tmp_path, Failing(), positions=0, clean=False)
    with pytest.raises(SideInputProcessingError,
                       match=r"Failing of store p failed on profiles\[0\] offset 4: ValueError"):
        reader._apply([FakeMessage(4, b"a", b"1")])
    assert s.positions == {"profiles": 0}
    s.engine.close()


def test_a_broadcast_store_reads_every_partition_each_from_its_own_position(
    tmp_path: Path,
) -> None:
    """Task 1 of a global table's store: partitions 0 and 1 of the topic, each named
    ``<topic>#<p>`` in the checkpoint; a partition no store reads is ignored, and the
    directory is trusted only with the same partitions (a topic grown is read again)."""
    processor = KeyValueProcessor()
    processor.init(SideInputsContext("p", 1, None, StringSerde(), JsonSerde()))  # type: ignore[arg-type]
    live = tmp_path / "partition-1"
    engine = RocksDbEngine(live)
    stack = build_stack("p", engine, StringSerde(), JsonSerde())
    read = {"profiles#0": ("profiles", 0), "profiles#1": ("profiles", 1)}
    s = SideInputStore("p", read, processor, stack.store, engine,  # type: ignore[arg-type]
                       live, {"profiles#0": 2, "profiles#1": 0}, clean=False)
    reader = SideInputReader(1, [s], None, lambda t: (None, None))  # type: ignore[arg-type]
    reader._apply([FakeMessage(1, b"old", b"1", partition=0),  # before partition 0's position
                   FakeMessage(2, b"a", b"1", partition=0),
                   FakeMessage(0, b"b", b"2", partition=1),
                   FakeMessage(7, b"c", b"3", partition=2),  # not read by this store
                   FakeMessage(1, b"a", None, partition=1),  # a tombstone from another partition
                   FakeMessage(4, partition=0, eof=True)])
    assert s.positions == {"profiles#0": 4, "profiles#1": 2} and reader.records == 3
    with s.store.all() as it:
        assert list(it) == [("b", 2)]
    assert reader.offsets() == {"p": {"profiles#0": 4, "profiles#1": 2}}
    reader.after_commit()
    marks = {"profiles#0": (0, 4), "profiles#1": (0, 2), "profiles#2": (0, 0)}.get
    assert distrust(live, {"profiles#0": 4, "profiles#1": 2}, list(read), marks) is None
    assert "names side inputs" in (distrust(live, {"profiles#0": 4, "profiles#1": 2},
                                            [*read, "profiles#2"], marks) or "")
    engine.close()
