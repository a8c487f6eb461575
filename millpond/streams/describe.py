"""What a dataflow app is made of: its sources, operators, stores, changelogs and sinks, as
text or as a Mermaid flowchart (``millpond app describe``)."""

from __future__ import annotations

from collections.abc import Iterator

from millpond.config import Config
from millpond.streams.compile import internal_topic
from millpond.streams.dataflow import STATEFUL, App, Node
from millpond.streams.timers import timers_store


def _walk(node: Node, depth: int = 0) -> Iterator[tuple[int, Node]]:
    yield depth, node
    for child in node.children:
        yield from _walk(child, depth + 1)


def _internal(name: str, config: Config | None) -> str:
    """The internal topic of key_by ``name`` (its bare name without a job's config)."""
    return (internal_topic(config.job.name, config.job.id, name) if config is not None
            else f"{name}-repartition")


def _what(node: Node, config: Config | None) -> str:
    if node.kind == "source" and node.topic is None:  # a key_by's records
        return f"re-keyed by {node.name}"
    if node.kind == "source":
        return f"source {node.topic}"
    if node.kind == "to":
        return f"to {node.topic}"
    if node.kind == "key_by":
        return f"key_by {node.label} (topic {_internal(node.label, config)})"
    if node.kind in STATEFUL:
        store = config.stores.get(node.label) if config is not None else None
        changelog = f", changelog {store.changelog.topic}" if store and store.changelog else ""
        timers = f", timers in store {timers_store(node.label)}" if node.kind == "process" else ""
        kind = node.kind
        if kind == "window":
            spec = node.fn
            hop = f", every {spec.step} ms" if spec.kind == "hopping" else ""
            size = (f"gap {spec.size} ms" if spec.kind == "session"
                    else f"of {spec.size} records, every {spec.step}" if spec.kind == "count"
                    else f"of {spec.size} ms{hop}")
            kind = (f"{spec.kind} window {size}, grace {spec.grace} ms, "
                    f"{spec.mode or 'no emit mode'}:")
        elif kind == "versioned_table":
            kind = f"versioned table, retention {node.fn.retention} ms:"
        elif kind == "global_table":
            kind = "global table (every partition, in every task):"
        elif kind == "window_join" and node.fn.kind == "interval":
            spec = node.fn
            kind = (f"{spec.how} interval join [t{spec.lower:+d}, t{spec.upper:+d}] ms, "
                    f"grace {spec.grace} ms:")
        return f"{kind} {node.label} (store {node.label}{changelog}{timers})"
    if node.kind == "join_asof":
        return f"{node.label}: as of its time in versioned table {node.fn[0]}"
    return node.label


def text(app: App, config: Config | None = None) -> str:
    """An indented tree per source; stateful operators with their store and changelog."""
    lines = []
    for root in [*app.sources.values(), *app.repartitions.values()]:
        for depth, node in _walk(root):
            lines.append("  " * depth + ("" if depth == 0 else "-> ") + _what(node, config))
    for table in app.global_tables.values():  # filled as side inputs, not a task's input
        lines += [f"side input {table.topic}", f"  -> {_what(table, config)}"]
    return "\n".join(lines) + "\n"


def mermaid(app: App, config: Config | None = None) -> str:
    """A Mermaid flowchart: topics as stadiums, stateful operators as cylinders (stores)."""
    ids: dict[int, str] = {}
    lines = ["flowchart LR"]
    topics: dict[str, str] = {}

    def topic_id(topic: str) -> str:
        if topic not in topics:
            topics[topic] = f"t{len(topics)}"
            lines.append(f'  {topics[topic]}(["{topic}"])')
        return topics[topic]

    def node_id(node: Node) -> str:
        if node.kind == "source" and node.topic is None:  # a key_by's internal topic
            return topic_id(_internal(node.name or "?", config))
        if node.kind in ("source", "to"):
            return topic_id(node.topic or "?")
        if id(node) not in ids:
            ids[id(node)] = f"n{len(ids)}"
            shape = ('[("{}")]' if node.kind in STATEFUL else '["{}"]').format(
                _what(node, config).replace('"', "'"))
            lines.append(f"  {ids[id(node)]}{shape}")
        return ids[id(node)]

    for root in [*app.sources.values(), *app.repartitions.values()]:
        for _, node in _walk(root):
            for child in node.children:
                lines.append(f"  {node_id(node)} --> {node_id(child)}")
            if node.kind == "key_by":  # through its internal topic to what reads it
                lines.append(f"  {node_id(node)} --> {node_id(app.repartitions[node.label])}")
    for table in app.global_tables.values():
        lines.append(f"  {topic_id(table.topic or '?')} --> {node_id(table)}")
    return "\n".join(lines) + "\n"
