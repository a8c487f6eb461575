"""A snapshot's manifest: every file with its size and checksum, and the changelog
offset and checkpoint the snapshot belongs to. Written last, so a snapshot without one
is an incomplete upload and is never used."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from millpond.backup.errors import SnapshotCorruptError
from millpond.changelog.snapshots import SnapshotRef
from millpond.files import file_digest

MANIFEST = "snapshot.json"
VERSION = 1


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a local file (:func:`millpond.files.file_digest`)."""
    return file_digest(path, "sha256")


@dataclass(frozen=True)
class FileEntry:
    """One file of a snapshot: its local name, where it is stored (relative to the store
    partition's root: ``sst/...`` or ``snapshots/<id>/...``), size and SHA-256."""

    name: str
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """Everything needed to restore and verify one snapshot."""

    id: str
    job: str
    store: str
    topic: str
    partition: int
    offset: int  # last changelog offset reflected
    task: str  # the task whose commit's checkpoint was uploaded
    created_ms: int
    files: list[FileEntry] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Total bytes of the snapshot's files."""
        return sum(f.size for f in self.files)

    def ref(self) -> SnapshotRef:
        return SnapshotRef(self.id, self.store, self.topic, self.partition, self.offset,
                           self.size, self.created_ms)

    def to_bytes(self) -> bytes:
        doc = {"version": VERSION, **asdict(self)}
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Manifest:
        """Decode a manifest; ``where`` names it in the :class:`SnapshotCorruptError`."""
        try:
            doc: dict[str, Any] = json.loads(data)
            if doc.get("version") != VERSION:
                raise ValueError(f"unknown manifest version {doc.get('version')!r}")
            files = [FileEntry(str(f["name"]), str(f["path"]), int(f["size"]), str(f["sha256"]))
                     for f in doc["files"]]
            return cls(str(doc["id"]), str(doc["job"]), str(doc["store"]), str(doc["topic"]),
                       int(doc["partition"]), int(doc["offset"]), str(doc["task"]),
                       int(doc["created_ms"]), files)
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotCorruptError(f"{where}: not a snapshot manifest ({exc})") from exc
