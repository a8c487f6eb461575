"""Which side-input partitions a task reads, and how its checkpoint names each one.

Task N reads partition N of each side-input topic (Samza's default grouping); its
checkpoint and the store's ``SIDE_INPUTS`` file name that partition by the topic alone. A
broadcast store (``stores.<s>.side.inputs.broadcast=true``) is read whole by every task:
each partition of its topics, named ``<topic>#<partition>`` (Samza's notation for one
partition of a stream; ``#`` is never in a Kafka topic's name).
"""

from __future__ import annotations

from collections.abc import Callable

from millpond.config import StoreConfig
from millpond.sideinputs.errors import SideInputsConfigError

Source = tuple[str, int]  # (topic, partition)


def sources(cfg: StoreConfig, partition: int, partition_count: Callable[[str], int | None]
            ) -> dict[str, Source]:
    """Position key -> side-input partition, for store ``cfg`` in task ``partition``
    (``partition_count`` is asked only for a broadcast store's topics)."""
    topics = dict.fromkeys(ref.topic for ref in cfg.side_inputs)
    if not cfg.side_inputs_broadcast:
        return {topic: (topic, partition) for topic in topics}
    out: dict[str, Source] = {}
    for topic in topics:
        count = partition_count(topic)
        if not count:
            raise SideInputsConfigError(
                f"store {cfg.name}: side-input topic {topic} does not exist; create it "
                "(compacted) before starting the job")
        out.update({f"{topic}#{p}": (topic, p) for p in range(count)})
    return out
