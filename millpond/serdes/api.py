"""The Serde interface: turn a Python object into bytes and back.

Every serde has a ``name`` (used in error messages) and two methods. Both raise ``SerdeError``
naming the serde when a value cannot be converted, never a bare TypeError/ValueError.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

T = TypeVar("T")


class Serde(ABC, Generic[T]):
    """Converts values of type ``T`` to bytes and back (the two must round-trip)."""

    name: str = "serde"

    @abstractmethod
    def to_bytes(self, obj: T) -> bytes:
        """Serialize ``obj``; raise SerdeError if it is not a value this serde handles."""

    @abstractmethod
    def from_bytes(self, data: bytes) -> T:
        """Deserialize ``data``; raise SerdeError if it is not a valid encoding."""

    @property
    def sorts_as_objects(self) -> bool:
        """True if serialized keys sort as the objects do (``a < b`` exactly when
        ``to_bytes(a) < to_bytes(b)`` as unsigned bytes): a layer above the serde may then
        merge keys it holds itself into a scan of the layers below (the object cache does)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
