"""Small helpers the example tasks share: which input topic plays which role."""

from __future__ import annotations

from typing import Any


def input_topic(config: Any, key: str, default: str) -> str:
    """The topic of the stream named by config ``key`` (``kafka.<topic>``), which must be one of
    the job's ``task.inputs``; a clear error at start-up instead of a KeyError per message."""
    stream = (config.get(key) or default).strip()
    topic = stream.split(".", 1)[1] if stream.startswith("kafka.") else stream
    inputs = [ref.topic for ref in config.job.inputs]
    if topic not in inputs:
        raise ValueError(f"{key}={stream} is not one of task.inputs ({', '.join(inputs)})")
    return topic
