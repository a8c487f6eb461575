"""Promises of the stores page with no other test: scans return fresh copies (mutating a
scanned value changes neither the store nor later gets), through every layer stack."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_stores_layers import keys_of, layout, open_store  # noqa: F401


def test_scans_return_fresh_copies(layout: tuple[str, int, int], tmp_path: Path) -> None:  # noqa: F811
    store, _ = open_store(layout, tmp_path)
    try:
        store.put("a", {"views": [1]})
        store.put("b", {"views": [2]})
        store.flush()
        for scan in (store.all, lambda: store.range("a", "c"), lambda: store.prefix("a")):
            with scan() as it:
                for _, value in it:
                    value["views"].append(99)  # a caller mutating what a scan gave it
            assert store.get("a") == {"views": [1]}
            assert store.get("b") == {"views": [2]}
        with store.all() as it:
            first = dict(it)
        with store.all() as it:
            second = dict(it)
        assert first == second and first["a"] is not second["a"]
        assert keys_of(store.all()) == ["a", "b"]
    finally:
        store.close()
