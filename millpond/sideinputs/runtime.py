"""What the container knows about side inputs: the stores that have them, their processor
classes, the side-input topics, and how to open a task's :class:`SideInputReader`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import Any

from millpond.api import SerdePair
from millpond.config import Config
from millpond.kafka import clients
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS, watermarks
from millpond.serdes import serdes_for
from millpond.sideinputs.errors import SideInputsConfigError
from millpond.sideinputs.processor import (
    SideInputsContext,
    load_processor_class,
    new_processor,
)
from millpond.sideinputs.reader import OutOfRange, SideInputReader, SideInputStore

log = logging.getLogger("millpond.sideinputs")


class SideInputs:
    """The job's side-input stores; built once per container (checks the config at once)."""

    def __init__(
        self, config: Config, consumer_conf: dict[str, Any], isolation: str,
        serdes_of: Callable[[str], SerdePair],
    ) -> None:
        self.config = config
        self.stores = {n: cfg for n, cfg in config.stores.items() if cfg.side_inputs}
        self.classes = {n: load_processor_class(config, cfg) for n, cfg in self.stores.items()}
        self.topics = {n: list(dict.fromkeys(r.topic for r in cfg.side_inputs))
                       for n, cfg in self.stores.items()}
        self._serdes_of = serdes_of
        self.partition_counts: dict[str, int] = {}  # topic -> partitions (check_partitions)
        conf = {k: v for k, v in consumer_conf.items() if k != "group.instance.id"}
        self._consumer_conf = {
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS, **conf,
            "group.id": f"{config.job.name}-{config.job.id}-side-inputs",  # never joined
            "enable.auto.commit": False, "enable.partition.eof": True,
            # A position that no longer exists comes back as an event: the reader applies
            # the job's policy, warns and counts, as for an input.
            "auto.offset.reset": "error", "isolation.level": isolation,
        }

    def __bool__(self) -> bool:
        return bool(self.stores)

    def all_topics(self) -> set[str]:
        return {t for topics in self.topics.values() for t in topics}

    def task_inputs(self, inputs: list[str]) -> list[str]:
        """``inputs`` without the side-input topics: Samza's low-level jobs list side inputs
        in ``task.inputs`` too, and their records go to the store, never to ``process()``."""
        side = self.all_topics()
        kept = [t for t in inputs if t not in side]
        if side and len(kept) < len(inputs):
            log.info("task.inputs %s are side inputs: they fill their stores and are not "
                     "passed to process()", sorted(set(inputs) - set(kept)))
        if inputs and not kept:
            raise SideInputsConfigError(
                f"{self.config.location('task.inputs')}: task.inputs names only side inputs "
                f"({', '.join(inputs)}); a task needs at least one input of its own")
        return kept

    def check_partitions(self, partition_count: Callable[[str], int | None], tasks: int) -> None:
        """Every side-input topic exists with one partition per task: task N reads partition
        N, so a partition beyond the task count would never be read (refused, not ignored).
        A broadcast store's topics may have any count: every task reads all of them (the
        counts are kept in :attr:`partition_counts` for the tasks' stores)."""
        for name, topics in self.topics.items():
            key = f"stores.{name}.side.inputs"
            for topic in topics:
                count = partition_count(topic)
                if count is None:
                    raise SideInputsConfigError(
                        f"{self.config.location(key)}: {key}: side-input topic {topic} does not "
                        "exist; create it (compacted) before starting the job")
                self.partition_counts[topic] = count
                if count != tasks and not self.stores[name].side_inputs_broadcast:
                    raise SideInputsConfigError(
                        f"{self.config.location(key)}: {key}: side-input topic {topic} has "
                        f"{count} partitions, the job has {tasks} tasks; task N reads partition "
                        "N of each side input, so they need the same partition count "
                        f"(repartition the side input to match, or set "
                        f"stores.{name}.side.inputs.broadcast=true to read it whole in "
                        "every task)")

    def open_steps(
        self, partition: int, stores: dict[str, Any], out_of_range: OutOfRange | None = None,
    ) -> Generator[None, None, SideInputReader | None]:
        """Bootstrap the side inputs of task ``partition`` a step at a time; returns its
        reader, or None if the job has no side inputs. ``stores`` are the task's opened
        stores (millpond.tasks.storage.OpenStore); ``out_of_range`` the job's policy for a
        side-input position that no longer exists; closing early closes the consumer."""
        if not self.stores:
            return None
        consumer = clients.consumer(self._consumer_conf)
        try:
            chosen = []
            for name, cfg in self.stores.items():
                s = stores[name]
                key_serde, msg_serde = serdes_for(self.config, cfg)
                context = SideInputsContext(name, partition, self.config, key_serde, msg_serde)
                start, read = s.side_start, s.side_sources
                positions = ({k: start[k] for k in read} if start is not None else
                             {k: watermarks(consumer, *source)[0] for k, source in read.items()})
                chosen.append(SideInputStore(
                    name, read, new_processor(self.classes[name], context), s.store, s.engine,
                    s.live, positions, clean=start is not None))
            reader = SideInputReader(partition, chosen, consumer, self._serdes_of, out_of_range)
            yield from reader.bootstrap_steps()
        except BaseException:
            consumer.close()
            raise
        return reader
