"""Reading a task's side inputs: bootstrap at open, follow while the task runs.

Each task owns partition N of every side-input topic (N = its task partition, Samza's
default grouping), or every partition of a broadcast store's topics
(:mod:`millpond.sideinputs.sources`), and reads them with a consumer of its own
(``assign()``, no group), so side-input partitions follow their task through every
rebalance: opened with it, closed with it. The runtime calls, per task:

* :meth:`SideInputReader.bootstrap_steps` while opening: reads every side-input partition
  up to the end offset seen when the bootstrap began, a batch per step, before the task's
  ``init()`` and first message;
* :meth:`SideInputReader.poll` once per run-loop iteration: applies what arrived since;
* :meth:`SideInputReader.offsets` when the checkpoint is written (same record, same
  transaction as the task's input offsets) and :meth:`SideInputReader.after_commit` once
  it committed (marks the local directory as reflecting those offsets).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from millpond.api import IncomingMessageEnvelope, SerdePair
from millpond.changelog.checkpoint import task_name
from millpond.kafka.reading import READ_WAIT_S, watermarks
from millpond.sideinputs import local
from millpond.sideinputs.errors import SideInputProcessingError, SideInputsStalledError
from millpond.sideinputs.processor import SideInputsProcessor
from millpond.sideinputs.sources import Source
from millpond.stores.api import KeyValueStore, StorageEngine

if TYPE_CHECKING:
    from millpond.tasks.input_reset import Reset

log = logging.getLogger("millpond.sideinputs")


class OutOfRange(Protocol):
    """The job's policy for a position that no longer exists (the tasks layer's
    ``ResetPolicy.resolve``): where to resume, warned about, or None if it is in range;
    raises under ``error``."""

    def __call__(self, topic: str, partition: int, offset: int, low: int, high: int,
                 when: str) -> Reset | None: ...

BATCH = 5000  # records per bootstrap step
POLL_BATCH = 1000  # records applied per run-loop iteration at most
STALL_S = 60.0  # a bootstrap with no progress for this long fails


@dataclass
class SideInputStore:
    """One side-input store of a task: its processor, layers and positions."""

    name: str
    sources: dict[str, Source]  # position key -> the side-input partition it names
    processor: SideInputsProcessor
    store: KeyValueStore[Any, Any]  # the writable stack (the task gets a read-only view)
    engine: StorageEngine
    live: Path | None
    positions: dict[str, int]  # position key -> next offset to apply
    clean: bool  # the directory's SIDE_INPUTS file describes its content
    written: dict[str, int] | None = None  # what that file says
    records: int = 0  # records applied since the task opened
    committing: dict[str, int] = field(default_factory=dict)


class SideInputReader:
    """The side inputs of one task."""

    def __init__(
        self, partition: int, stores: list[SideInputStore], consumer: Consumer,
        serdes_of: Callable[[str], SerdePair], out_of_range: OutOfRange | None = None,
    ) -> None:
        self.partition = partition
        self.stores = stores
        self.consumer = consumer
        self._serdes_of = serdes_of
        self._out_of_range = out_of_range
        self._when = "at start"  # a gap found while bootstrapping / while running
        self.resets: list[Reset] = []  # positions that no longer existed, as resolved
        # each side-input partition read -> the stores it fills, with their position key
        self._by_source: dict[Source, list[tuple[SideInputStore, str]]] = {}
        for s in stores:
            for key, source in s.sources.items():
                self._by_source.setdefault(source, []).append((s, key))
        self.records = 0  # records read from the side inputs since the task opened
        self._closed = False

    @property
    def name(self) -> str:
        return task_name(self.partition)

    # ---- open ---------------------------------------------------------------------------
    def bootstrap_steps(self) -> Generator[None, None, None]:
        """Catch every side-input partition up to the end seen now, a batch per step."""
        began = time.monotonic()
        start = {s.name: dict(s.positions) for s in self.stores}
        ends = {src: watermarks(self.consumer, *src)[1] for src in self._by_source}
        self.consumer.assign([TopicPartition(topic, partition, self._next((topic, partition)))
                              for topic, partition in self._by_source])
        last_progress = time.monotonic()
        while not self._caught_up(ends):
            # the run loop steps this between polls: the open tasks must not wait on it
            msgs = self.consumer.consume(BATCH, READ_WAIT_S)
            if msgs:
                last_progress = time.monotonic()
                self._apply(msgs)
            elif time.monotonic() - last_progress > STALL_S:
                behind = {f"{t}[{p}]": (self._next((t, p)), end)
                          for (t, p), end in ends.items()}
                raise SideInputsStalledError(
                    f"task {self.name}: side inputs made no progress for {STALL_S:.0f}s "
                    f"(partition: (position, end)) {behind}")
            yield None
        for s in self.stores:
            log.info("task %s side inputs ready: store %s read %d records from %s to %s "
                     "in %.1fs", self.name, s.name, s.records, start[s.name], s.positions,
                     time.monotonic() - began)
        self._when = "while running"

    def skipped(self) -> dict[tuple[str, str], int]:
        """(topic, reason) -> side-input records skipped since the task opened."""
        out: dict[tuple[str, str], int] = {}
        for reset in self.resets:
            for reason, n in reset.counts().items():
                out[(reset.topic, reason)] = out.get((reset.topic, reason), 0) + n
        return out

    def skipped_totals(self) -> dict[str, int]:
        """topic -> side-input records skipped since the task opened (for the checkpoint)."""
        out: dict[str, int] = {}
        for reset in self.resets:
            if reset.skipped:
                out[reset.topic] = out.get(reset.topic, 0) + reset.skipped
        return out

    def _next(self, source: Source) -> int:
        """The next offset of ``source`` that one of its stores still has to apply."""
        return min(s.positions[key] for s, key in self._by_source[source])

    def _caught_up(self, ends: dict[Source, int]) -> bool:
        return all(self._next(source) >= end for source, end in ends.items())

    # ---- run ----------------------------------------------------------------------------
    def poll(self) -> int:
        """Apply the side-input records that arrived (non-blocking); how many were read."""
        msgs = self.consumer.consume(POLL_BATCH, 0)
        if msgs:
            self._apply(msgs)
        return len(msgs)

    def _apply(self, msgs: list[Message]) -> None:
        for msg in msgs:
            err = msg.error()
            topic: str = msg.topic()  # type: ignore[assignment]
            partition: int = msg.partition()  # type: ignore[assignment]
            offset: int = msg.offset()  # type: ignore[assignment]
            targets = self._by_source.get((topic, partition), ())
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # also past trailing markers
                    for s, key in targets:
                        s.positions[key] = max(s.positions[key], offset)
                elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                    self._gap(topic, partition)
                elif err.fatal():
                    raise KafkaException(err)
                else:
                    log.warning("side inputs of task %s: %s", self.name, err.str())
                continue
            due = [(s, key) for s, key in targets if offset >= s.positions[key]]
            if not due:
                continue
            self.records += 1
            envelope = self._envelope(msg, topic, partition, offset)
            for s, key in due:
                if s.clean:  # first write after a commit: the file no longer describes it
                    if s.live is not None:
                        local.clear_offsets(s.live)
                    s.clean = False
                self._process(s, envelope)
                s.positions[key] = offset + 1
                s.records += 1

    def _gap(self, topic: str, partition: int) -> None:
        """The fetch of ``topic[partition]`` went out of range (records deleted before they
        were read, or a recreated topic): the job's ``auto.offset.reset`` policy decides
        where the stores resume (warned and counted as for an input), and fetching restarts
        there."""
        targets = self._by_source[(topic, partition)]
        offset = self._next((topic, partition))
        low, high = watermarks(self.consumer, topic, partition)
        reset = (self._out_of_range(topic, partition, offset, low, high, self._when)
                 if self._out_of_range is not None else None)
        position = offset
        if reset is not None:
            self.resets.append(reset)
            position = reset.new
            for s, key in targets:
                s.positions[key] = position
        elif not low <= offset <= high:  # no policy given: the log start, as librdkafka did
            position = low
            for s, key in targets:
                s.positions[key] = position
        # librdkafka refuses to seek a partition whose fetch failed this way: assign it anew.
        tp = TopicPartition(topic, partition)
        self.consumer.incremental_unassign([tp])
        self.consumer.incremental_assign([TopicPartition(topic, partition, position)])

    def _envelope(self, msg: Message, topic: str, partition: int, offset: int
                  ) -> IncomingMessageEnvelope:
        key_serde, msg_serde = self._serdes_of(topic)
        try:
            key = msg.key()
            if key is not None and key_serde is not None:
                key = key_serde.from_bytes(key)
            value = msg.value()
            if value is not None and msg_serde is not None:
                value = msg_serde.from_bytes(value)
        except Exception as exc:
            raise SideInputProcessingError(
                f"side input {topic}[{partition}] offset {offset}: deserialization failed: "
                f"{type(exc).__name__}: {exc}; nothing after the last commit was committed"
            ) from exc
        return IncomingMessageEnvelope(topic, partition, offset, key, value,
                                       msg.timestamp()[1], msg.headers() or ())  # type: ignore[arg-type]

    @staticmethod
    def _process(s: SideInputStore, envelope: IncomingMessageEnvelope) -> None:
        try:
            for key, value in s.processor.process(envelope, s.store) or ():
                if key is None:
                    continue
                if value is None:
                    s.store.delete(key)
                else:
                    s.store.put(key, value)
        except Exception as exc:
            raise SideInputProcessingError(
                f"side-input processor {type(s.processor).__name__} of store {s.name} failed "
                f"on {envelope.stream}[{envelope.partition}] offset {envelope.offset}: "
                f"{type(exc).__name__}: {exc}; nothing after the last commit was committed"
            ) from exc

    # ---- commit -------------------------------------------------------------------------
    def offsets(self) -> dict[str, dict[str, int]]:
        """Per store, the next offset of each side-input topic: what the checkpoint records."""
        for s in self.stores:
            s.committing = dict(s.positions)
        return {s.name: dict(s.committing) for s in self.stores}

    def after_commit(self) -> None:
        """The checkpoint with :meth:`offsets` committed: record in each store's directory
        that its content reflects them (its memtables flushed first)."""
        for s in self.stores:
            if s.live is None or (s.clean and s.written == s.committing):
                continue
            s.engine.flush()
            local.write_offsets(s.live, s.name, self.partition, s.committing)
            s.written = dict(s.committing)
            s.clean = True

    def close(self) -> None:
        """Close the consumer (the stores close with the task's storage)."""
        if not self._closed:
            self._closed = True
            self.consumer.close()
