"""One memory budget per process: ``job.container.memory.mb`` divided between its consumers.

Samza's ``cluster-manager.container.memory.mb`` maps to it. Without either key the budget is
:data:`DEFAULT_BUDGET_MB` (a 1 GB process), whatever the number of tasks and stores. The plan
(fractions of the budget ``B``):

==========================  ====================================================================
RocksDB block cache         40% of B, ONE cache shared by every store of the process; the
                            memtables are charged to it through one write-buffer manager
                            (a third of it), so blocks and memtables together stay in 40%
object caches               15% of B, shared: each open store's cache gets an equal share
restore                     up to 16 MiB (4%) each for the restore consumer's prefetch and
                            for one restore batch in Python; its fetch responses are at
                            most a quarter of the prefetch (fetch.max.bytes, 1-4 MiB) and
                            half that a partition (max.partition.fetch.bytes)
input consumer prefetch     up to 64 MiB (4%): librdkafka's queued.max.messages.kbytes
                            (payload bytes), queued.min.messages (one message a KiB of
                            it: each queued message costs ~450 B besides its payload) and
                            max.partition.fetch.bytes (an eighth of it, at most 1 MiB)
producer buffers            6% of B: all task producers of the process together; each
                            task producer's queue.buffering.max.kbytes is 1/N of it for a
                            job of N tasks (at least 1 MiB: librdkafka never queues a
                            message larger than its buffer), and its
                            queue.buffering.max.messages one message a KiB of that
Python and headroom         the rest: at least 25%, and at least 160 MiB or half the budget
                            (at least 64 MiB), so under 640 MB every share above shrinks in
                            proportion: the interpreter, libraries, the task's own objects,
                            librdkafka's threads, what RocksDB holds outside the cache
==========================  ====================================================================

A store's own ``container.cache.size.bytes`` gives it a block cache of its own (per task,
outside the shared one); its own ``container.write.buffer.size.bytes`` sets its memtable size
(still counted by the shared write-buffer manager); its own ``object.cache.max.bytes`` bounds
its object cache per task (outside the shared share). A librdkafka setting under
``systems.kafka.consumer.*`` / ``producer.*`` wins over the plan's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from millpond.config.properties import Properties
from millpond.config.values import get_int

MiB = 1024 * 1024
BUDGET_KEY = "job.container.memory.mb"
SAMZA_BUDGET_KEY = "cluster-manager.container.memory.mb"
DEFAULT_BUDGET_MB = 1024
MIN_BUDGET_MB = 96
HEADROOM_SHARE = 0.25  # at least this share of the budget is left for Python ...
HEADROOM_MIN = 64 * MiB  # ... and at least this (the interpreter and libraries take ~50 MB)
# ... and, while it is at most half the budget, this much: what no share bounds (the
# interpreter and libraries, librdkafka's threads, RocksDB's table readers and compaction
# and flush buffers, freed memory the allocator keeps) measured 150-190 MiB for 4 tasks x
# 2 stores of 1.6M x 1 KB under a 384 MB cap, where 25% (96 MiB) got it OOM-killed.
HEADROOM_SMALL = 160 * MiB

BLOCK_CACHE_SHARE = 0.40
WRITE_BUFFER_SHARE_OF_CACHE = 1 / 3
OBJECT_CACHE_SHARE = 0.15
RESTORE_SHARE = 0.04  # each: the restore consumer's prefetch, and one batch
RESTORE_CAP = 16 * MiB
INPUT_PREFETCH_SHARE = 0.04
INPUT_PREFETCH_CAP = 64 * MiB  # librdkafka's default queued.max.messages.kbytes
# librdkafka counts a prefetched message against queued.max.messages.kbytes by its payload
# only, and each costs ~450 B more (its op, and its share of the fetch response it keeps
# alive): 100k queued 103-byte messages took +44 MiB (librdkafka 2.16), and a session job
# at a 128 MiB budget held ~29 MiB of input prefetch against the plan's 3.4 MiB. So a
# prefetch share also bounds the count, queued.min.messages (librdkafka's 100,000): one
# message a KiB of the share, so small messages' overheads stay within about half of it
# and messages of 1 KiB or more meet the byte bound first.
QUEUED_MESSAGE_COST = 1024
MIN_QUEUED_MESSAGES = 1000  # one run-loop batch
# The count is checked before a fetch, and one partition's response (librdkafka's
# max.partition.fetch.bytes, 1 MiB) can hold ~75k records of 14 B: the plan bounds it to an
# eighth of the share (a session job at 128 MiB: 135 -> 116 MiB peak, no slower).
FETCH_SHARE = 8
FETCH_DEFAULT = MiB  # librdkafka's max.partition.fetch.bytes
FETCH_MIN = 64 * 1024
# The restore consumer's fetch responses: 16 MiB (8 MiB a partition) took a 3M-record
# restore to 207 MiB peak at a 128 MiB budget and 238-251 MiB at 1 GB; a quarter of the
# restore prefetch share (1 MiB and 4 MiB there), half that a partition: 100 and 139-159 MiB
# at the same speed at 1 GB. librdkafka wants fetch.max.bytes >= message.max.bytes (1 MB).
RESTORE_FETCH_SHARE = 4
FETCH_MAX_MIN = MiB  # librdkafka: fetch.max.bytes >= message.max.bytes (1,000,000)
RESTORE_FETCH_MAX = 4 * MiB
PRODUCER_SHARE = 0.06
PRODUCER_MIN = MiB  # a task producer's smallest buffer: librdkafka queues no larger message
MEMTABLE_CAP = 32 * MiB  # Samza's default memtable size
NUM_MEMTABLES = 3  # rocksdb.num.write.buffers' default

STORE_CACHE_KEY = "container.cache.size.bytes"
STORE_WRITE_BUFFER_KEY = "container.write.buffer.size.bytes"
STORE_OBJECT_BYTES_KEY = "object.cache.max.bytes"
_SYS = "systems.kafka."
INPUT_PREFETCH_KEY = "queued.max.messages.kbytes"
QUEUED_MESSAGES_KEY = "queued.min.messages"
FETCH_BYTES_KEY = "max.partition.fetch.bytes"
FETCH_MAX_KEY = "fetch.max.bytes"
PRODUCER_BUFFER_KEY = "queue.buffering.max.kbytes"
PRODUCER_MESSAGES_KEY = "queue.buffering.max.messages"


@dataclass(frozen=True)
class MemoryPart:
    """One consumer of the budget: its name, its bytes, what it is and what changed it."""

    name: str
    bytes: int
    note: str
    in_budget: bool = True  # False: per task or per store, outside the budget (a user's key)


@dataclass(frozen=True)
class MemoryPlan:
    """How one process's memory budget is divided (see the module's docstring)."""

    budget: int  # bytes
    source: str  # which key set it, or "default"
    block_cache: int  # the shared RocksDB block cache (memtables charged to it)
    write_buffers: int  # the shared write-buffer manager's limit (inside block_cache)
    memtable: int  # each memtable's size, unless a store sets its own
    object_caches: int  # shared by every open object cache without its own bound
    restore_prefetch: int  # the restore consumer's queued.max.messages.kbytes (bytes)
    restore_batch: int  # bytes of records in one restore batch
    input_prefetch: int  # the input consumer's queued.max.messages.kbytes (bytes)
    producer_buffer: int  # all task producers' queue.buffering.max.kbytes together (bytes;
    # the user's systems.kafka.producer. key: each producer's)
    overrides: tuple[MemoryPart, ...] = field(default=())  # the user's keys that changed it
    user_input_prefetch: bool = False  # systems.kafka.consumer.queued.max.messages.kbytes set
    user_producer_buffer: bool = False  # systems.kafka.producer.queue.buffering.max.kbytes set

    @property
    def input_messages(self) -> int:
        """The input consumer's queued.min.messages: its prefetch share's message count."""
        return queued_messages(self.input_prefetch)

    @property
    def input_fetch_bytes(self) -> int:
        """The input consumer's max.partition.fetch.bytes: one partition's fetch response."""
        return max(FETCH_MIN, min(FETCH_DEFAULT, self.input_prefetch // FETCH_SHARE))

    def input_fetch(self, partitions: int) -> tuple[int, int]:
        """The input consumer's (max.partition.fetch.bytes, fetch.max.bytes) for a process
        that may hold ``partitions`` input partitions: one fetch response across all of them
        no larger than one partition's share (at least a 1 MB message), divided between them
        so that each response carries every partition (a response of one partition's 1 MiB
        drained 4 partitions one after another). librdkafka queues every record of a
        response at once, each a ~450 B op: 32 partitions of 14-byte records took +463 MiB
        against a 41 MiB share with its own fetch.max.bytes."""
        whole = max(FETCH_MAX_MIN, self.input_fetch_bytes)
        return max(FETCH_MIN, min(self.input_fetch_bytes, whole // max(1, partitions))), whole

    @property
    def restore_messages(self) -> int:
        """The restore consumer's queued.min.messages."""
        return queued_messages(self.restore_prefetch)

    @property
    def restore_fetch_bytes(self) -> int:
        """The restore consumer's fetch.max.bytes: one fetch response, all partitions."""
        return max(FETCH_MAX_MIN,
                   min(RESTORE_FETCH_MAX, self.restore_prefetch // RESTORE_FETCH_SHARE))

    @property
    def restore_partition_fetch_bytes(self) -> int:
        """The restore consumer's max.partition.fetch.bytes."""
        return self.restore_fetch_bytes // 2

    @property
    def headroom(self) -> int:
        """What is left for Python, libraries and what the plan does not bound."""
        return self.budget - self.block_cache - self.object_caches - self.restore_prefetch \
            - self.restore_batch - self.input_prefetch - self.producer_buffer

    def parts(self) -> list[MemoryPart]:
        """Each part of the budget, then the overrides outside it."""
        return [
            MemoryPart("rocksdb block cache", self.block_cache,
                       "one LRU cache shared by every store; memtables are charged to it"),
            MemoryPart("  of which memtables", self.write_buffers,
                       f"one write-buffer manager; each memtable {_mb(self.memtable)}"),
            MemoryPart("object caches", self.object_caches,
                       "shared: each open store's cache gets an equal share"),
            MemoryPart("restore prefetch", self.restore_prefetch,
                       "restore consumer's queued.max.messages.kbytes, "
                       f"{self.restore_messages:,} messages, "
                       f"{self.restore_fetch_bytes // 1024:,} KiB a fetch"),
            MemoryPart("restore batch", self.restore_batch, "records in one restore batch"),
            MemoryPart("input prefetch", self.input_prefetch,
                       "input consumer's queued.max.messages.kbytes"
                       + (" (your systems.kafka.consumer. key)" if self.user_input_prefetch
                          else "") + f", {self.input_messages:,} messages, "
                       f"{self.input_fetch_bytes // 1024:,} KiB a partition's fetch"),
            MemoryPart("producer buffers", self.producer_buffer,
                       ("each task producer's queue.buffering.max.kbytes (your "
                        "systems.kafka.producer. key)" if self.user_producer_buffer else
                        "all task producers: each 1/N of it for N tasks")),
            MemoryPart("python and headroom", self.headroom,
                       "interpreter, libraries, the task's objects, index/filter blocks"),
            *self.overrides,
        ]

    def task_producer_buffer(self, tasks: int, message_max_bytes: int = 0) -> int:
        """Each task producer's queue.buffering.max.kbytes in bytes for a job of ``tasks``
        tasks: the plan's producer share divided between them (a process can hold every
        task of the job), never under :data:`PRODUCER_MIN` nor under one message of
        ``message_max_bytes``. The user's systems.kafka.producer. key is each producer's
        as it is."""
        if self.user_producer_buffer:
            return self.producer_buffer
        return max(PRODUCER_MIN, message_max_bytes, self.producer_buffer // max(1, tasks))

    def render(self) -> str:
        """The plan as text, one part a line (``millpond describe --explain-memory``)."""
        lines = [f"memory budget {_mb(self.budget)} ({self.source})"]
        for part in self.parts():
            where = "" if part.in_budget else "  [outside the budget]"
            lines.append(f"  {part.name:<22} {_mb(part.bytes):>11}  {part.note}{where}")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line for the run loop's start."""
        return (f"memory plan: budget {_mb(self.budget)} ({self.source}): block cache "
                f"{_mb(self.block_cache)} (memtables {_mb(self.write_buffers)}), object caches "
                f"{_mb(self.object_caches)}, restore {_mb(self.restore_prefetch)} + "
                f"{_mb(self.restore_batch)}, input {_mb(self.input_prefetch)}, producers "
                f"{_mb(self.producer_buffer)}{' each' if self.user_producer_buffer else ''}, "
                f"headroom {_mb(self.headroom)}"
                + (f"; {len(self.overrides)} store key(s) outside it" if self.overrides else ""))


def plan_memory(props: Properties, stores: Mapping[str, Mapping[str, str]] | None = None,
                ) -> MemoryPlan:
    """The plan for ``props`` (``stores``: each store's ``stores.<name>.*`` properties)."""
    samza_mb = (get_int(props, SAMZA_BUDGET_KEY, DEFAULT_BUDGET_MB, minimum=MIN_BUDGET_MB)
                if SAMZA_BUDGET_KEY in props else None)  # checked even when unused
    if BUDGET_KEY in props:
        mb = get_int(props, BUDGET_KEY, DEFAULT_BUDGET_MB, minimum=MIN_BUDGET_MB)
        source = BUDGET_KEY
    elif samza_mb is not None:
        mb, source = samza_mb, SAMZA_BUDGET_KEY
    else:
        mb, source = DEFAULT_BUDGET_MB, "default: no job.container.memory.mb"
    budget = mb * MiB
    # Under 640 MB the headroom floor (160 MiB, or half the budget and at least 64 MiB)
    # takes more than 25%: the shares shrink.
    floor = min(HEADROOM_SMALL, max(HEADROOM_MIN, budget // 2))
    scale = min(1.0, (budget - floor) / (budget * (1 - HEADROOM_SHARE)))
    share = budget * scale  # what the fractions below are taken of
    block_cache = int(share * BLOCK_CACHE_SHARE)
    write_buffers = int(block_cache * WRITE_BUFFER_SHARE_OF_CACHE)
    overrides: list[MemoryPart] = []
    for name, sp in (stores or {}).items():
        for key, what in ((STORE_CACHE_KEY, "its own block cache, per task"),
                          (STORE_WRITE_BUFFER_KEY, "its memtable size (x rocksdb.num.write."
                           "buffers), in the shared write-buffer manager"),
                          (STORE_OBJECT_BYTES_KEY, "its own object cache bound, per task")):
            if sp.get(key, "").strip():
                value = get_int(props, f"stores.{name}.{key}", 0)
                overrides.append(MemoryPart(f"stores.{name}.{key}", value, what,
                                            in_budget=key == STORE_WRITE_BUFFER_KEY))
    user_input = f"{_SYS}consumer.{INPUT_PREFETCH_KEY}" in props
    user_producer = f"{_SYS}producer.{PRODUCER_BUFFER_KEY}" in props
    return MemoryPlan(
        budget=budget,
        source=f"{source}={mb}" if source != "default: no job.container.memory.mb" else source,
        block_cache=block_cache,
        write_buffers=write_buffers,
        memtable=max(MiB, min(MEMTABLE_CAP, write_buffers // NUM_MEMTABLES)),
        object_caches=int(share * OBJECT_CACHE_SHARE),
        restore_prefetch=min(RESTORE_CAP, int(share * RESTORE_SHARE)),
        restore_batch=min(RESTORE_CAP, int(share * RESTORE_SHARE)),
        input_prefetch=(_kbytes(props, f"{_SYS}consumer.{INPUT_PREFETCH_KEY}") if user_input
                        else min(INPUT_PREFETCH_CAP, int(share * INPUT_PREFETCH_SHARE))),
        producer_buffer=(_kbytes(props, f"{_SYS}producer.{PRODUCER_BUFFER_KEY}")
                         if user_producer else int(share * PRODUCER_SHARE)),
        overrides=tuple(overrides),
        user_input_prefetch=user_input,
        user_producer_buffer=user_producer,
    )


def fetch_max_bytes(planned: int, conf: Mapping[str, object]) -> int:
    """fetch.max.bytes of ``planned`` bytes for a consumer of ``conf`` as librdkafka takes
    it: never under one message (message.max.bytes) or one partition's fetch
    (max.partition.fetch.bytes), and under the user's receive.message.max.bytes by 512."""
    fetch = max(planned, int(str(conf.get("message.max.bytes", 1_000_000))),
                int(str(conf.get(FETCH_BYTES_KEY, 0))))
    if "receive.message.max.bytes" in conf:
        fetch = min(fetch, int(str(conf["receive.message.max.bytes"])) - 512)
    return fetch


def queued_messages(prefetch_bytes: int) -> int:
    """queued.min.messages for a consumer whose prefetch may take ``prefetch_bytes``."""
    return max(MIN_QUEUED_MESSAGES, prefetch_bytes // QUEUED_MESSAGE_COST)


def _kbytes(props: Properties, key: str) -> int:
    return get_int(props, key, 0, minimum=1) * 1024


def _mb(n: int) -> str:
    return f"{n / MiB:,.1f} MiB"
