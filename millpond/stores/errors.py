"""Errors raised by key-value stores (all subclasses of StoreError)."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class StoreError(MillpondError):
    """A store operation failed. ``store`` names the store once a layer that knows it is crossed.

    The message is rendered from ``detail`` and ``store``, so the serialized layer can add the
    store name to an engine's error and re-raise the very same exception.
    """

    def __init__(self, detail: str, *, store: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.store = store

    def add_store(self, store: str) -> StoreError:
        """Record the store name (keeps one already set) and return self."""
        if self.store is None:
            self.store = store
        return self

    def __str__(self) -> str:
        return f"store {self.store!r}: {self.detail}" if self.store else self.detail


class StoreClosedError(StoreError):
    """The store, or an iterator over it, was used after close() (by the task's code)."""

    exit_code = USER_ERROR


class NoneEntryError(StoreError, ValueError):
    """A None key or value was given: stores hold no None (use delete() to remove a key)."""

    exit_code = USER_ERROR


class StoreConfigError(StoreError, ValueError):
    """A store setting (e.g. rocksdb.compression) has a value the store cannot use."""

    exit_code = USER_ERROR


class LargeMessageError(StoreError):
    """A value is larger than changelog.max.message.size.bytes and the store has
    disallow.large.messages=true (Samza's RecordTooLargeException)."""


class StatePermissionsError(StoreError):
    """A directory of the job's local state cannot be given job.state.permissions' mode
    (another user owns it)."""

    exit_code = USER_ERROR
