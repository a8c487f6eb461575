"""What happens to a message that cannot be deserialized or processed.

``task.dlq.stream`` set: the raw message goes to the dead-letter topic with the error in
its headers, and processing goes on. A message whose process() failed is skipped whole: the
store writes it made were undone before (header ``millpond.store.writes.undone``: how many). Else ``task.drop.deserialization.errors=true`` drops
undecodable messages with a warning. Otherwise the error stops the job, naming the topic,
partition and offset (nothing after the previous message is committed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Message

from millpond.config import Config
from millpond.kafka.producer import TrackedProducer
from millpond.tasks.errors import MessageError

log = logging.getLogger("millpond.container")


class DeadLetterPolicy:
    """Decides per failed message: skip it (True) or raise :class:`MessageError`."""

    def __init__(self, config: Config, producer_of: Callable[[int], TrackedProducer]) -> None:
        self.topic = config.job.dlq_stream.topic if config.job.dlq_stream else None
        # whether a failed process() is skipped (so its store writes are journaled, to be
        # undone); without a dead-letter topic it stops the job and nothing is journaled
        self.skips_process = bool(self.topic)
        self.drop_deserialization = config.job.drop_deserialization_errors
        self._producer_of = producer_of

    def __call__(self, stage: str, msg: Message, exc: BaseException, undone: int = 0) -> bool:
        """Skip ``msg`` (True) or raise. ``undone``: the store writes of its process() that
        were undone (they are named in the dead-letter headers and the warning)."""
        topic, partition, offset = msg.topic() or "?", msg.partition() or 0, msg.offset() or 0
        error = MessageError(topic, partition, offset, exc, stage)
        if self.topic:
            headers = [("millpond.error", str(error).encode()), ("millpond.topic", topic.encode()),
                       ("millpond.partition", str(partition).encode()),
                       ("millpond.offset", str(offset).encode()), ("millpond.stage", stage.encode()),
                       ("millpond.store.writes.undone", str(undone).encode())]
            self._producer_of(partition).send(self.topic, None, msg.key(), msg.value(), headers)
            log.warning("sent to dead-letter topic %s: %s%s", self.topic, error,
                        f" ({undone} store writes undone)" if undone else "")
            return True
        if stage == "deserialization" and self.drop_deserialization:
            log.warning("dropped: %s", error)
            return True
        raise error
