"""Compiling a dataflow onto a job's config: ``app.class`` becomes the keys a StreamTask job
would have written by hand.

``app.class=<module>:<attribute>`` names an :class:`~millpond.streams.App`. :func:`with_app`
returns the job's config with ``task.class`` (the runtime's :class:`DataflowTask`),
``task.inputs`` (the app's sources) and, for every stateful operator, a RocksDB store of that
name with the source's key serde, JSON values and a changelog
``<job.name>-<job.id>-<name>-changelog``, each of them a default under what the user
configured under ``stores.<name>.*``. Every command that reads
the config (run, restore, store, status, Spark) sees the same stores, so the tooling works on
a dataflow's state unchanged. The added keys are located at the ``app.class`` line.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from millpond.config import Config, Properties, StreamRef
from millpond.config.values import describe
from millpond.streams.dataflow import App
from millpond.streams.errors import DataflowError
from millpond.streams.timers import timers_store

WINDOW_WRITE_BATCH = 100_000  # a window store's write.batch.size (object.cache.size's default)

APP_KEY = "app.class"
# A key_by's topic keeps its records until the reading task has committed past them (the job
# deletes those, as Kafka Streams purges its repartition topics), never by age.
INTERNAL_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1"}
DATAFLOW_TASK = "millpond.streams.runtime.DataflowTask"
# What makes a global table's store one (fixed: its topic read whole as a side input), and
# the processor that fills it unless the properties name another.
GLOBAL_PROCESSOR = "millpond.sideinputs.KeyValueProcessor"
# How often a task looks for due processing-time timers (task.window.ms) unless configured.
PROCESSING_TIMER_MS = 100


def has_app(config: Config) -> bool:
    """True if ``app.class`` names a millpond app (``module:attribute``); a Samza
    application class (no ``:``) is not one."""
    return ":" in (config.get(APP_KEY) or "")


def load_app(config: Config) -> App:
    """Import the app ``app.class`` names (``module:attribute``, importable from the cwd): an
    :class:`App`, or a function of the job's :class:`Config` that returns one (an app whose
    topics come from the properties)."""
    spec = (config.get(APP_KEY) or "").strip()
    where = config.location(APP_KEY)
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise DataflowError(f"{where}: {APP_KEY}={spec!r}: expected <module>:<attribute>, "
                            "e.g. app.class=myjobs.counts:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        app = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise DataflowError(f"{where}: {APP_KEY}={spec} cannot be imported: {exc}") from exc
    if callable(app) and not isinstance(app, App):
        app = app(config)  # a function of the job's config that builds the app
    if not isinstance(app, App):
        raise DataflowError(f"{where}: {APP_KEY}={spec} is a {type(app).__name__}, not a "
                            "millpond.streams.App (or a function of the config returning one)")
    if not app.sources:
        raise DataflowError(f"{where}: the app {spec} reads no topic (app.source(topic))")
    return app


def internal_topic(job_name: str, job_id: str, name: str) -> str:
    """The internal topic of key_by ``name``: the job's own, so its ACL prefix covers it."""
    return f"{job_name}-{job_id}-{name}-repartition"


def internal_topics(config: Config) -> list[str]:
    """The internal topics of the job's app (none for a StreamTask job)."""
    if not has_app(config):
        return []
    job = config.job
    return [internal_topic(job.name, job.id, name) for name in load_app(config).repartitions]


def with_app(config: Config) -> Config:
    """``config`` with the keys its ``app.class`` implies (unchanged without one)."""
    if not has_app(config) or config.get("task.class") == DATAFLOW_TASK:
        return config  # no app, a Samza application class (ignored), or compiled already
    return Config.from_properties(compile_properties(config.properties))


def _without_partial_stores(props: Properties) -> Properties:
    """``props`` without the keys of stores that have no ``factory`` (an app's store that
    the user only tuned, e.g. its TTL: complete once compiled)."""
    out = Properties(props.source)
    for key in props:
        name = key.split(".")[1] if key.startswith("stores.") and key.count(".") >= 2 else None
        if name is not None and f"stores.{name}.factory" not in props:
            continue
        file, line = props.location(key) or (props.source or "?", 0)
        out.set(key, props[key], file, line)
    return out


def compile_properties(props: Properties) -> Properties:
    """``props`` with the keys their ``app.class`` implies (the same ``props`` without one):
    the task class and inputs, the internal topics' serdes, and for each stateful operator
    the defaults of its store under the ``stores.<name>.*`` keys the user set."""
    if ":" not in (props.get(APP_KEY) or "") or props.get("task.class") == DATAFLOW_TASK:
        return props
    config_log = logging.getLogger("millpond.config")
    was, config_log.disabled = config_log.disabled, True  # its lines come with the final one
    try:
        config = Config.from_properties(_without_partial_stores(props))
    finally:
        config_log.disabled = was
    app = load_app(config)
    props = props.copy()
    file, line = props.location(APP_KEY) or ("<app.class>", 0)
    job = config.job
    internal = {name: internal_topic(job.name, job.id, name) for name in app.repartitions}
    sources = ",".join(f"kafka.{topic}" for topic in app.sources)
    inputs = ",".join([sources, *(f"kafka.{t}" for t in internal.values())])
    given = (config.get("task.inputs") or "").strip()
    if given and {s.strip() for s in given.split(",")} != set(sources.split(",")):
        raise DataflowError(f"{config.location('task.inputs')}: task.inputs={given} but the "
                            f"app reads {sources}; remove task.inputs (the app's sources "
                            "decide it)")
    if config.get("task.class"):
        raise DataflowError(f"{config.location('task.class')}: set task.class or app.class, "
                            "not both")
    props.set("task.class", DATAFLOW_TASK, file, line)
    props.set("task.inputs", inputs, file, line)
    for topic in internal.values():  # re-keyed records: JSON keys and values
        for part in ("key", "msg"):
            key = f"systems.kafka.streams.{topic}.samza.{part}.serde"
            if key not in props:
                props.set(key, "json", file, line)
    stores: dict[str, str] = {}  # store -> its key serde
    for name, node in app.stores.items():
        if node.kind == "global_table":  # keyed like its topic, which is no task input
            stores[name] = config.stream_serdes(
                StreamRef("kafka", node.topic or ""))[0] or "string"
            continue
        source = _source_of(app, node)
        key_serde = ("json" if source in app.repartitions
                     else config.stream_serdes(StreamRef("kafka", source))[0])
        # a window's keys are its own (end|start|key): strings ordered by window end
        stores[name] = ("string" if node.kind in ("window", "window_join", "versioned_table")
                        else key_serde or "string")
        if node.kind == "process":  # its timers: time-ordered string keys
            stores[timers_store(name)] = "string"
    for name, key_serde in stores.items():
        # the defaults under what the user configured (stores.<name>.* keys win)
        defaults = {"factory": "rocksdb", "key.serde": key_serde, "msg.serde": "json"}
        table = app.global_tables.get(name)
        if table is not None:  # filled from its topic, no changelog (as Samza's side inputs)
            defaults["side.inputs.processor.factory"] = GLOBAL_PROCESSOR
            for key, value in _global_table_keys(props, name, table.topic or "").items():
                if key not in props:
                    props.set(key, value, file, line)
        elif not config.get("job.changelog.system"):
            defaults["changelog"] = f"kafka.{job.name}-{job.id}-{name}-changelog"
        operator = app.stores.get(name)
        if operator is not None and operator.kind == "window":
            # every window is written (a put) and closed (a delete), most of a key space at
            # each window end: dirty entries up to the object cache's default size before a
            # write-down, so a window that opens and closes between commits costs nothing
            defaults["write.batch.size"] = str(WINDOW_WRITE_BATCH)
        for key, value in defaults.items():
            if f"stores.{name}.{key}" not in props:
                props.set(f"stores.{name}.{key}", value, file, line)
    watches_clock = any(node.kind == "process" or (
        node.kind == "window" and (node.fn.idle or node.fn.early_ms))
        for node in app.stores.values())
    if watches_clock and "task.window.ms" not in props:
        # processing-time timers are looked at in window(), this often
        props.set("task.window.ms", str(PROCESSING_TIMER_MS), file, line)
    return props


def _global_table_keys(props: Properties, name: str, topic: str) -> dict[str, str]:
    """The keys that make store ``name`` global table ``topic``: its side input, read whole
    by every task. Another value set for one of them is refused at its line."""
    keys = {f"stores.{name}.side.inputs": f"kafka.{topic}",
            f"stores.{name}.side.inputs.broadcast": "true"}
    for key, value in keys.items():
        if key in props and props[key].strip() != value:
            raise DataflowError(f"{describe(props, key)}: {key}={props[key]}: store {name} is "
                                f"the app's global table of {topic}, so it is {value}; remove "
                                "the key")
    return keys


def _source_of(app: App, target: object) -> str:
    """The topic (or key_by name) whose records reach ``target`` (each operator hangs under
    one source)."""
    for topic, root in [*app.sources.items(), *app.repartitions.items()]:
        todo = [root]
        while todo:
            node = todo.pop()
            if node is target:
                return topic
            todo.extend(node.children)
    raise DataflowError("an operator is not reachable from any source")  # pragma: no cover


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read a job's properties (overrides, ``${NAME}``) and compile its ``app.class``: what
    every command works from."""
    return Config.load(path, overrides, transform=compile_properties)


DROPPED_KEY = "app.dropped.operators"


def check_stored_operators(config: Config, stored: set[str]) -> None:
    """Refuse to start an app whose last commit holds state of stateful operators it no
    longer has (``stored``: the store names the job's checkpoints name): a renamed operator
    would start from nothing while its state sits unused. ``app.dropped.operators`` lists
    the ones dropped on purpose."""
    if not has_app(config):
        return
    dropped = {n.strip() for n in (config.get(DROPPED_KEY) or "").split(",") if n.strip()}
    gone = sorted(stored - set(config.stores) - dropped)
    if gone:
        names = ", ".join(gone)
        raise DataflowError(
            f"{config.location(APP_KEY)}: the job's last commit holds the state of stateful "
            f"operator(s) {names}, which the app no longer has (renamed or removed?). Its "
            "name is its store's: give it back its old name to keep its state, or list it in "
            f"{DROPPED_KEY}={names} to start without it (its changelog is left as it is)")
