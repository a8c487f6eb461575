"""A side-input store's local directory: which side-input offsets its content reflects.

After each commit the task writes ``SIDE_INPUTS`` (temp file, fsync, rename) into the
store's directory: the next offset of every side-input topic, exactly as the checkpoint
that commit wrote. The first record applied after a commit removes it, so a directory
holding writes no checkpoint describes (a crash, a task closed without committing) is never
trusted. On opening, the directory is kept only if its file equals the checkpoint and the
offsets are still inside the topics; anything else wipes it and the store is read again from
the start of its side inputs (compacted topics), so it is exact under every guarantee.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from millpond.changelog import local
from millpond.files import remove_file, write_atomically
from millpond.stores import permissions
from millpond.stores.api import StorageEngine
from millpond.stores.errors import StoreError

log = logging.getLogger(__name__)

SIDE_INPUTS_FILE = "SIDE_INPUTS"


def write_offsets(live: Path, store: str, partition: int, offsets: dict[str, int]) -> None:
    """Atomically record that ``live`` reflects the side inputs up to ``offsets`` (the
    directory's files given the store's modes)."""
    doc = {"version": 1, "store": store, "partition": partition, "offsets": offsets}
    mode = local.store_mode(live)
    permissions.apply(live, mode)  # the files RocksDB wrote since
    write_atomically(live / SIDE_INPUTS_FILE, json.dumps(doc, sort_keys=True),
                     permissions.file_mode(mode))


def read_offsets(live: Path) -> dict[str, int] | None:
    """The offsets ``live`` reflects; None if absent or unreadable (never trusted)."""
    try:
        doc = json.loads((live / SIDE_INPUTS_FILE).read_text())
        return {str(t): int(o) for t, o in doc["offsets"].items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("%s: unreadable %s file (%s)", live, SIDE_INPUTS_FILE, exc)
        return None


def clear_offsets(live: Path) -> None:
    """Remove ``SIDE_INPUTS``: the store is about to hold writes no checkpoint describes."""
    remove_file(live / SIDE_INPUTS_FILE)


def distrust(
    live: Path, checkpointed: dict[str, int] | None, keys: list[str],
    watermarks_of: Callable[[str], tuple[int, int]],
) -> str | None:
    """Why the directory at ``live`` must be read again from the start; None if it is
    exactly what the checkpoint describes. ``keys``: the position keys of the side-input
    partitions the store reads now (:mod:`millpond.sideinputs.sources`), whose
    ``watermarks_of`` each gives."""
    if not checkpointed:
        return "the checkpoint names no side-input offsets for it"
    if sorted(checkpointed) != sorted(keys):
        return (f"the checkpoint names side inputs {sorted(checkpointed)}, the config "
                f"{sorted(keys)}")
    found = read_offsets(live)
    if found is None:
        return f"no {SIDE_INPUTS_FILE} file (written to after the last commit, or never committed)"
    if found != checkpointed:
        return f"it reflects offsets {found}, the checkpoint says {checkpointed}"
    for key, offset in checkpointed.items():
        low, high = watermarks_of(key)
        # Beyond the end: the topic was recreated or truncated, read it again. Below its
        # start (records deleted by retention before they were read): the store is still
        # what the checkpoint says; the reader resumes per auto.offset.reset, says so and
        # counts what was skipped, as for an input.
        if offset > high:
            return f"{key} now holds offsets {low}..{high}, the checkpoint says {offset}"
    return None


def open_store_engine(
    store: str, live: Path | None, checkpointed: dict[str, int] | None, keys: list[str],
    open_engine: Callable[[], StorageEngine], watermarks_of: Callable[[str], tuple[int, int]],
) -> tuple[StorageEngine, dict[str, int] | None]:
    """Open a side-input store's engine (its directory locked by the caller); return it and
    the offsets to resume its side inputs at, or None to read them from their start (the
    directory was wiped, or the engine is in memory)."""
    if live is None:
        return open_engine(), None
    had_data = live.exists() and any(live.iterdir())
    if had_data:
        reason = distrust(live, checkpointed, keys, watermarks_of)
    else:
        reason = "there is no local copy" if checkpointed else None
    if had_data and reason is None:
        try:
            return open_engine(), dict(checkpointed or {})
        except StoreError as exc:
            reason = f"it cannot be opened ({exc})"
    if reason is not None:
        log.warning("side-input store %s at %s: reading its side inputs again from the start: "
                    "%s", store, live, reason)
    local.wipe(live)
    return open_engine(), None
