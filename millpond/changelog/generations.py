"""Which changelog topic a store uses: the checkpoint's generation, else the configured one.

``millpond spark rescale`` writes a store's state to a new topic (``<topic>-gen<K>``) with
the new partition count and records it in every task's checkpoint (``Checkpoint.topics``);
the old topic is kept until the user deletes it. Everything that reads or writes a
changelog (the tasks, the container's start-up topic check, the offline tools, the Spark
jobs) resolves the topic through :func:`resolve`, so they all agree on the generation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer

from millpond.changelog.checkpoint import Checkpoint, read_checkpoints
from millpond.changelog.errors import GenerationError
from millpond.config import Config, StoreConfig
from millpond.kafka.admin import TopicAdmin

_GEN = re.compile(r"^(?P<base>.+)-gen(?P<n>[0-9]+)$")


def store_topic(config: Config, store: StoreConfig) -> str:
    """The changelog topic of ``store`` (configured or default name)."""
    configured = store.changelog.topic if store.changelog is not None else None
    return changelog_topic(config.job.name, config.job.id, store.name, configured)


def changelog_topic(job_name: str, job_id: str, store: str, configured: str | None) -> str:
    """The store's changelog topic: the configured one, else ``<job>-<id>-<store>-changelog``."""
    return configured or f"{job_name}-{job_id}-{store}-changelog"


def resolve(config: Config, store: StoreConfig, topics: Mapping[str, str] | None) -> str:
    """``store``'s changelog topic: the checkpoint's (``topics``), else :func:`store_topic`."""
    if topics and store.name in topics:
        return topics[store.name]
    return store_topic(config, store)


def job_topics(checkpoints: Iterable[Checkpoint]) -> dict[str, str]:
    """The store -> topic overrides all of a job's checkpoints agree on.

    A rescale writes every task's checkpoint in one transaction, so tasks disagreeing means
    checkpoints were edited by hand or written by two tools: refuse rather than guess.
    """
    found: dict[str, dict[str, list[str]]] = {}
    for ckpt in checkpoints:
        for store, topic in ckpt.topics.items():
            found.setdefault(store, {}).setdefault(topic, []).append(ckpt.task)
    out: dict[str, str] = {}
    for store, by_topic in found.items():
        if len(by_topic) > 1:
            detail = "; ".join(f"{t}: {', '.join(sorted(tasks)[:3])}"
                               for t, tasks in sorted(by_topic.items()))
            raise GenerationError(f"the checkpoints name different changelog topics for store "
                                  f"{store!r} ({detail}); fix them with millpond checkpoint")
        out[store] = next(iter(by_topic))
    return out


def resolve_all(config: Config, checkpoints: Iterable[Checkpoint]) -> dict[str, str]:
    """store -> changelog topic for every changelogged store of the job."""
    overrides = job_topics(checkpoints)
    return {name: resolve(config, cfg, overrides) for name, cfg in config.stores.items()
            if cfg.changelog is not None}


def next_generation(config: Config, store: StoreConfig, current: str) -> str:
    """The topic the next rescale writes: ``<configured topic>-gen<K+1>`` where ``current``
    is generation K (the configured topic itself is generation 1)."""
    base = store_topic(config, store)
    match = _GEN.match(current)
    if current == base or match is None or match["base"] != base:
        return f"{base}-gen2"
    return f"{base}-gen{int(match['n']) + 1}"


def current_topics(
    admin: TopicAdmin, consumer: Consumer, config: Config, checkpoint_topic: str,
) -> dict[str, str]:
    """store -> changelog topic of a job now, from its checkpoint topic (if it exists)."""
    checkpoints = ({} if admin.partition_count(checkpoint_topic) is None
                   else read_checkpoints(consumer, checkpoint_topic))
    return resolve_all(config, checkpoints.values())
