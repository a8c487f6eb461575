"""Side inputs (Samza's ``stores.<s>.side.inputs``): stores filled from input streams.

A store with side inputs has no changelog: each task fills it from partition N (its own)
of the side-input topics, or from every partition for a broadcast store
(``stores.<s>.side.inputs.broadcast``, a Streams API global table), through a processor
(:class:`SideInputsProcessor`), bootstraps it before its first message, keeps following the
topics while it runs, and checkpoints the side-input offsets with its own. The modules:

* :mod:`.processor`: the processor API and :class:`KeyValueProcessor`;
* :mod:`.runtime`: :class:`SideInputs`, the container's view (config checks, opening);
* :mod:`.sources`: which side-input partitions a task reads, and how its checkpoint names them;
* :mod:`.reader`: :class:`SideInputReader`, one task's bootstrap, poll and offsets;
* :mod:`.local`: which offsets a local store directory reflects, and when to wipe it;
* :mod:`.readonly`: the read-only view tasks get.
"""

from millpond.sideinputs.errors import (
    ReadOnlyStoreError,
    SideInputProcessingError,
    SideInputsConfigError,
    SideInputsError,
    SideInputsStalledError,
)
from millpond.sideinputs.processor import KeyValueProcessor, SideInputsContext, SideInputsProcessor
from millpond.sideinputs.readonly import ReadOnlyStore

__all__ = [
    "KeyValueProcessor",
    "ReadOnlyStore",
    "ReadOnlyStoreError",
    "SideInputProcessingError",
    "SideInputsConfigError",
    "SideInputsContext",
    "SideInputsError",
    "SideInputsProcessor",
    "SideInputsStalledError",
]
