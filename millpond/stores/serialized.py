"""SerializedStore: a typed KeyValueStore over a BytesStore, via a key and a value serde.

It sits below the object cache and above the logged layer (or the engine): the cache writes
its dirty objects down through ``write_batch``, which encodes them all and hands the layer
below one batch. Ordering of range/prefix/all is that of the serialized key bytes. Serde and
store errors raised here or below get this store's name added before they propagate. None is
not checked here: the null-safe layer at the top of the stack rejects it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from millpond.serdes import Serde, SerdeError
from millpond.stores.api import BytesStore, K, KeyValueIterator, KeyValueStore, V
from millpond.stores.errors import StoreError

_Failure = (SerdeError, StoreError)


class SerializedStore(KeyValueStore[K, V]):
    """Typed store named ``store_name``: encodes keys/values with the serdes, stores bytes."""

    def __init__(
        self,
        inner: BytesStore,
        key_serde: Serde[K],
        msg_serde: Serde[V],
        store_name: str,
    ) -> None:
        self.name = store_name
        self.inner = inner
        self.key_serde = key_serde
        self.msg_serde = msg_serde
        # Bound once: the get/put paths are a handful of calls with no attribute chains.
        self._kenc = key_serde.to_bytes
        self._kdec = key_serde.from_bytes
        self._venc = msg_serde.to_bytes
        self._vdec = msg_serde.from_bytes
        self._get = inner.get
        self._put = inner.put
        self._delete = inner.delete
        self._write_batch = inner.write_batch

    def __repr__(self) -> str:
        return f"SerializedStore({self.name!r}, {self.key_serde!r}, {self.msg_serde!r})"

    def get(self, key: K) -> V | None:
        """Value under ``key`` or None."""
        try:
            data = self._get(self._kenc(key))
        except _Failure as exc:
            exc.add_store(self.name)
            raise
        if data is None:
            return None
        try:
            return self._vdec(data)
        except SerdeError as exc:
            raise _stored(exc, self.name, key) from exc.__cause__

    def get_all(self, keys: Iterable[K]) -> dict[K, V]:
        """Present keys and their values (absent keys are left out)."""
        kenc, vdec = self._kenc, self._vdec
        try:
            originals: dict[bytes, K] = {}
            for key in keys:
                originals[kenc(key)] = key
            found = self.inner.get_all(list(originals))
        except _Failure as exc:
            exc.add_store(self.name)
            raise
        out: dict[K, V] = {}
        for kb, vb in found.items():
            try:
                out[originals[kb]] = vdec(vb)
            except SerdeError as exc:
                raise _stored(exc, self.name, originals[kb]) from exc.__cause__
        return out

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``."""
        try:
            self._put(self._kenc(key), self._venc(value))
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def put_all(self, items: Iterable[tuple[K, V]]) -> None:
        """Store every pair; all are encoded before any is written."""
        kenc, venc = self._kenc, self._venc
        try:
            encoded = [(kenc(key), venc(value)) for key, value in items]
            self.inner.put_all(encoded)
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def delete(self, key: K) -> None:
        """Remove ``key`` if present."""
        try:
            self._delete(self._kenc(key))
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def delete_all(self, keys: Iterable[K]) -> None:
        """Remove every key; all are encoded before any is deleted."""
        kenc = self._kenc
        try:
            encoded = [kenc(key) for key in keys]
            self.inner.delete_all(encoded)
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def write_batch(self, items: Sequence[tuple[K, V | None]]) -> None:
        """Encode every put and delete (value None), then apply them below as one batch.

        This is the cache's write-down, so a value that does not serialize fails here, at
        the commit after its put; the error names the store and the key, and nothing of the
        batch is written.
        """
        kenc, venc = self._kenc, self._venc
        encoded: list[tuple[bytes, bytes | None]] = []
        append = encoded.append
        key: K | None = None
        try:
            for key, value in items:
                append((kenc(key), None if value is None else venc(value)))
        except _Failure as exc:
            exc.add_store(self.name)
            exc.detail += f" (key {key!r:.80}, written down at flush)"
            raise
        try:
            self._write_batch(encoded)
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def range(self, start: K, end: K) -> KeyValueIterator[K, V]:
        """Entries with serialized start <= serialized key < serialized end, in key order."""
        try:
            return self._decoding(self.inner.range(self._kenc(start), self._kenc(end)))
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def prefix(self, prefix: K) -> KeyValueIterator[K, V]:
        """Entries whose serialized key starts with the serialized ``prefix``, in key order."""
        try:
            return self._decoding(self.inner.prefix(self._kenc(prefix)))
        except _Failure as exc:
            exc.add_store(self.name)
            raise

    def all(self) -> KeyValueIterator[K, V]:
        """Every entry, in key order."""
        try:
            return self._decoding(self.inner.all())
        except StoreError as exc:
            exc.add_store(self.name)
            raise

    def flush(self) -> None:
        """Flush the layers below."""
        try:
            self.inner.flush()
        except StoreError as exc:
            exc.add_store(self.name)
            raise

    def close(self) -> None:
        """Flush and close the layers below; idempotent."""
        try:
            self.inner.close()
        except StoreError as exc:
            exc.add_store(self.name)
            raise

    def _decoding(self, inner: KeyValueIterator[bytes, bytes]) -> _DecodingIterator[K, V]:
        return _DecodingIterator(inner, self._kdec, self._vdec, self.name)


class _DecodingIterator(KeyValueIterator[K, V]):
    """Decodes the (key, value) byte pairs of an inner iterator."""

    __slots__ = ("_inner", "_kdec", "_vdec", "_store")

    def __init__(
        self,
        inner: KeyValueIterator[bytes, bytes],
        kdec: Callable[[bytes], K],
        vdec: Callable[[bytes], V],
        store: str,
    ) -> None:
        self._inner = inner
        self._kdec = kdec
        self._vdec = vdec
        self._store = store

    def __next__(self) -> tuple[K, V]:
        try:
            key, value = next(self._inner)
        except _Failure as exc:
            exc.add_store(self._store)
            raise
        try:
            return self._kdec(key), self._vdec(value)
        except SerdeError as exc:
            raise _stored(exc, self._store, _shown(self._kdec, key)) from exc.__cause__

    def close(self) -> None:
        """Close the inner iterator."""
        self._inner.close()


def _stored(exc: SerdeError, store: str, key: object) -> SerdeError:
    """``exc`` (a stored entry that does not decode) naming the store and the entry's key."""
    exc.add_store(store)
    exc.detail += f" (the stored entry of key {key!r:.80})"
    return exc


def _shown(kdec: Callable[[bytes], object], key: bytes) -> object:
    """A stored key as its serde reads it, else its bytes."""
    try:
        return kdec(key)
    except SerdeError:
        return key
