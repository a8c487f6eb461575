"""A stored value that does not decode is named with its store and key at read time."""

from __future__ import annotations

import pytest

from millpond.serdes import JsonSerde, SerdeError, StringSerde
from millpond.stores import InMemoryEngine, build_store


@pytest.mark.parametrize("cache", [0, 100])
def test_reads_of_an_undecodable_value_name_store_and_key(cache: int) -> None:
    engine = InMemoryEngine()
    engine.put(b"user-3", b"\xff not json")
    engine.put(b"user-4", b"4")
    store = build_store("counts", engine, StringSerde(), JsonSerde(), cache)
    for read in (lambda: store.get("user-3"), lambda: store.get_all(["user-3", "user-4"]),
                 lambda: list(store.all())):
        with pytest.raises(SerdeError) as info:
            read()
        assert "store 'counts'" in str(info.value) and "key 'user-3'" in str(info.value)
    assert store.get("user-4") == 4
