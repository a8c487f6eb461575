"""Errors raised by serdes: one exception type naming the serde and, when known, the store."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class SerdeError(MillpondError):
    """A value could not be (de)serialized, or a serde could not be built.

    ``serde`` is the serde's name (its registry name when built from config), ``store`` the store
    being read or written (filled in by the serialized store layer), ``location`` the config
    "file:line" that referenced the serde (set by ``build_serde``). The message is rendered from
    these attributes, so a layer can add the store name and re-raise the same exception.
    """

    def __init__(
        self,
        serde: str,
        detail: str,
        *,
        store: str | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(serde, detail)
        self.serde = serde
        self.detail = detail
        self.store = store
        self.location = location

    def add_store(self, store: str) -> SerdeError:
        """Record the store the failing value belongs to (keeps an inner store name) and return self."""
        if self.store is None:
            self.store = store
        return self

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        store = f"store {self.store!r}: " if self.store else ""
        return f"{where}{store}serde {self.serde!r}: {self.detail}"


class SerdeConfigError(SerdeError):
    """A serde could not be built as configured (an unknown factory, a bad Avro schema, a
    class that cannot be imported): exit 2. A value that does not (de)serialize is a plain
    :class:`SerdeError`, a runtime failure."""

    exit_code = USER_ERROR
