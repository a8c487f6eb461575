"""The view of a side-input store that tasks get: reads only.

Only the side inputs fill the store; a write by the task would be lost the next time the
store is re-read from its side inputs, so it is refused instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from millpond.sideinputs.errors import ReadOnlyStoreError
from millpond.stores.api import KeyValueIterator, KeyValueStore


class ReadOnlyStore(KeyValueStore[Any, Any]):
    """Delegates reads to ``inner``; every write raises :class:`ReadOnlyStoreError`."""

    def __init__(self, inner: KeyValueStore[Any, Any], name: str) -> None:
        self._inner = inner
        self._name = name

    def __repr__(self) -> str:
        return f"ReadOnlyStore({self._name!r})"

    def _refuse(self, op: str) -> NoReturn:
        raise ReadOnlyStoreError(
            f"store {self._name!r} is filled from its side inputs (stores.{self._name}."
            f"side.inputs); tasks may only read it ({op} refused)")

    def get(self, key: Any) -> Any:
        return self._inner.get(key)

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        return self._inner.get_all(keys)

    def put(self, key: Any, value: Any) -> None:
        self._refuse("put")

    def put_all(self, items: Iterable[tuple[Any, Any]]) -> None:
        self._refuse("put_all")

    def delete(self, key: Any) -> None:
        self._refuse("delete")

    def delete_all(self, keys: Iterable[Any]) -> None:
        self._refuse("delete_all")

    def write_batch(self, items: Sequence[tuple[Any, Any]]) -> None:
        self._refuse("write_batch")

    def range(self, start: Any, end: Any) -> KeyValueIterator[Any, Any]:
        return self._inner.range(start, end)

    def prefix(self, prefix: Any) -> KeyValueIterator[Any, Any]:
        return self._inner.prefix(prefix)

    def all(self) -> KeyValueIterator[Any, Any]:
        return self._inner.all()

    def flush(self) -> None:
        """Nothing to do: the runtime flushes the store at each commit."""

    def close(self) -> None:
        """Nothing to do: the runtime closes the store with its task."""
