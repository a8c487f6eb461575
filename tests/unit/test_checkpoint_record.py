"""The checkpoint record's encoding (millpond.changelog.checkpoint.Checkpoint), byte for
byte: it is read back by every later version of the job and by `millpond checkpoint`, so
its field names, version and key order are a format, not an implementation detail."""

from __future__ import annotations

import pytest

from millpond.changelog.checkpoint import Checkpoint, StoreOffset
from millpond.changelog.errors import CheckpointError

FULL = Checkpoint("partition-1", 1, inputs={"in": 7}, changelogs={"counts": 41},
                  side_inputs={"profiles": {"side": 20}}, topics={"counts": "c-g2"},
                  skipped={"in": 3})


def test_the_encoding_is_fixed() -> None:
    assert FULL.to_bytes() == (
        b'{"changelogs": {"counts": 41}, "inputs": {"in": 7}, "partition": 1, '
        b'"side_inputs": {"profiles": {"side": 20}}, "skipped": {"in": 3}, '
        b'"task": "partition-1", "topics": {"counts": "c-g2"}, "version": 1}')
    # the optional fields only when set, so older readers see what they always saw
    assert Checkpoint("partition-0", 0).to_bytes() == (
        b'{"changelogs": {}, "inputs": {}, "partition": 0, "task": "partition-0", '
        b'"version": 1}')


def test_round_trip_and_the_fields_a_record_may_lack() -> None:
    assert Checkpoint.from_bytes(FULL.to_bytes()) == FULL
    assert Checkpoint.from_bytes(b'{"task": "partition-2", "partition": "2"}') == (
        Checkpoint("partition-2", 2))


def test_garbage_names_its_origin() -> None:
    with pytest.raises(CheckpointError, match=r"^checkpoint: not a millpond checkpoint"):
        Checkpoint.from_bytes(b"x" * 300)
    with pytest.raises(CheckpointError) as err:
        Checkpoint.from_bytes(b'{"task": 1}' + b" " * 300, "topic c@5")
    assert str(err.value).startswith("topic c@5: not a millpond checkpoint")
    assert str(err.value).endswith(repr(b'{"task": 1}' + b" " * 189))  # the first 200 bytes


def test_a_store_offset_file_is_fixed_too() -> None:
    assert StoreOffset("counts", "c", 3, 41).to_json() == (
        '{"offset": 41, "partition": 3, "store": "counts", "topic": "c", "version": 1}')
