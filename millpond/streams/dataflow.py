"""Declaring a dataflow: an :class:`App` of sources, operators and sinks.

A stream carries ``(key, value)`` records: the key is the Kafka record's key (deserialized
with the stream's key serde), and every stateful operator keeps its state per key, in a
millpond store named after the operator (``stores.<name>.*`` options apply; its changelog,
backups, restore and Spark tools are those of any store). Operators that change only values
(``map``, ``filter``, ``flat_map``, ``peek``) keep the key, so the records of a key stay in the
task that owns its partition.

Declaring builds a tree of :class:`Node`; nothing runs until the app is compiled onto tasks
(:mod:`millpond.streams.runtime`) or a test driver (:mod:`millpond.streams.testing`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from millpond.streams import aggregations as aggs
from millpond.streams import asof, windows
from millpond.streams.aggregations import Aggregation
from millpond.streams.errors import DataflowError
from millpond.streams.windows import WindowedStream

STATEFUL = ("stateful_map", "aggregate", "process", "window", "table", "window_join",
            "versioned_table", "global_table")


@dataclass(eq=False)
class Node:
    """One operator: its kind, name, function, and the operators fed by its output."""

    kind: str  # source, map, map_kv (map with the key), filter, flat_map, peek, stateful_map, aggregate, process,
    #            window, table (a topic kept in a store), global_table (a topic kept whole
    #            in every task's store, fed as a side input), join (a lookup in a table),
    #            versioned_table (a topic's values by time), join_asof (a lookup in one),
    #            window_join (its left side; "window_join_right": its right side), key_by,
    #            branch, route (a branch's output), merge, to
    label: str  # how errors name it: "map #2 of page-views" or the stateful operator's name
    fn: Any = None
    topic: str | None = None  # source and sink (None: a key_by's internal topic)
    name: str | None = None  # stateful operators: the store's; key_by: the internal topic's
    children: list[Node] = field(default_factory=list)


class App:
    """A dataflow application: ``app.class=<module>:<attribute>`` names one in a job's
    properties, and ``millpond run`` runs it like a StreamTask job."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.sources: dict[str, Node] = {}
        self.stores: dict[str, Node] = {}
        # key_by name -> the source node of the records it re-keyed (its internal topic)
        self.repartitions: dict[str, Node] = {}
        self.sinks: set[str] = set()
        self.join_sides: dict[str, Node] = {}  # window_join name -> its right side's node
        # global table name -> its node (topic: the side input that fills its store)
        self.global_tables: dict[str, Node] = {}
        self._count = 0

    def source(self, topic: str) -> Stream:
        """The records of ``topic`` (its serdes: the job's stream or system serdes)."""
        node = self.sources.get(topic)
        if node is None:
            self._not_global(topic)
            node = self.sources[topic] = Node("source", f"source {topic}", topic=topic)
        return Stream(self, node)

    def table(self, topic: str, name: str) -> Table:
        """The latest value per key of ``topic`` (a changelog of a table, usually compacted:
        a null value deletes the key), kept in store ``name``, for :meth:`Stream.join`.
        Task N holds the keys of partition N, so the streams joined with it must be keyed
        and partitioned like ``topic`` (millpond checks the partition counts are equal)."""
        node = self.source(topic)._add("table", name=name)._node
        return Table(name, node, topic)

    def global_table(self, topic: str, name: str) -> Table:
        """The latest value per key of *every* partition of ``topic`` (a null value deletes
        the key), kept in store ``name`` in every task: Kafka Streams' ``GlobalKTable``. The
        store is filled as a side input of the task (``stores.<name>.side.inputs``, read
        whole: ``side.inputs.broadcast``), caught up to the topic's end before the task's
        first record and followed while it runs; it has no changelog (the topic is its
        source of truth). So the streams joined with it need not be partitioned like
        ``topic``, and :meth:`Stream.join` may look up a key made from the value
        (``key=``). ``topic`` cannot also be a source of the app."""
        if topic in self.sources:
            raise DataflowError(f"global_table {name!r}: {topic} is also a source of the "
                                "app; a global table's topic fills its store only")
        node = Node("global_table", name, topic=topic, name=name)
        self._store(name, node)
        self.global_tables[name] = node
        return Table(name, node, topic)

    def _not_global(self, topic: str) -> None:
        for name, node in self.global_tables.items():
            if node.topic == topic:
                raise DataflowError(f"source {topic}: it is the topic of global table "
                                    f"{name!r}, which it fills only")

    def versioned_table(self, topic: str, name: str, retention_ms: int, *,
                        timestamp: Callable[[Any], int] | None = None) -> Table:
        """``topic``'s values per key by time (each record a version at its timestamp, or
        ``timestamp(value)``; a null value deletes from its time on), kept in store ``name``
        for ``retention_ms`` of the table's stream time, for :meth:`Stream.join_asof`.
        Partitioned as :meth:`table`. A version older than the history kept is late
        (counted, dropped)."""
        spec = asof.versioned(name, retention_ms, timestamp)
        node = self.source(topic)._add("versioned_table", spec, name=name)._node
        return Table(name, node, topic)

    def _label(self, kind: str, topic: str) -> str:
        self._count += 1
        return f"{kind} #{self._count} (from {topic})"

    def _store(self, name: str, node: Node) -> None:
        self._check_name(name, node)
        self.stores[name] = node

    def _check_name(self, name: str, node: Node) -> None:
        what = "internal topic" if node.kind == "key_by" else "store"
        if not name or not isinstance(name, str):
            raise DataflowError(f"{node.kind} needs a name (it names the operator's {what})")
        taken = {*self.stores, *self.repartitions,
                 *(f"{n}-timers" for n, s in self.stores.items() if s.kind == "process")}
        wanted = {name, f"{name}-timers"} if node.kind == "process" else {name}
        if wanted & taken:
            raise DataflowError(f"two operators are named {name!r}: the name of a stateful "
                                "operator or a key_by names its store or internal topic and "
                                "must be unique (a process operator's timers take "
                                "<name>-timers)")


@dataclass(frozen=True)
class Table:
    """A topic kept as a table (the latest value per key) in the store ``name``."""

    name: str
    node: Node
    topic: str


class Stream:
    """A stream of ``(key, value)`` records; each method adds an operator and returns the
    stream of its output."""

    def __init__(self, app: App, node: Node, origin: str | None = None) -> None:
        self._app = app
        self._node = node
        self._origin = origin or node.topic or "?"

    def _add(self, kind: str, fn: Any = None, name: str | None = None,
             topic: str | None = None, called: str | None = None) -> Stream:
        label = name if name is not None else self._app._label(called or kind, self._origin)
        node = Node(kind, label, fn=fn, topic=topic, name=name)
        if kind in STATEFUL:
            self._app._store(name or "", node)
        self._node.children.append(node)
        return Stream(self._app, node, self._origin)

    # ---- stateless ------------------------------------------------------------------------
    def map(self, fn: Callable[..., Any], *, with_key: bool = False) -> Stream:
        """``fn(value)`` for each value (with ``with_key``: ``fn(key, value)``); the key
        stays."""
        return self._add("map_kv" if with_key else "map", fn, called="map")

    def map_values(self, fn: Callable[[Any], Any]) -> Stream:
        """The same as :meth:`map` (Kafka Streams' name): values change, keys never do."""
        return self.map(fn)

    def filter(self, predicate: Callable[[Any], bool]) -> Stream:
        """The records whose value ``predicate`` accepts."""
        return self._add("filter", predicate)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> Stream:
        """Each value of ``fn(value)`` (none, one or many), under the record's key."""
        return self._add("flat_map", fn)

    def peek(self, fn: Callable[[Any, Any], None]) -> Stream:
        """Call ``fn(key, value)`` for each record (logging, metrics) and pass it on."""
        return self._add("peek", fn)

    # ---- several streams ------------------------------------------------------------------
    def branch(self, *predicates: Callable[[Any], bool], default: bool = False) -> list[Stream]:
        """One stream per predicate: each record goes to the first one whose predicate
        accepts its value (Kafka Streams' ``split``); with ``default``, one more stream gets
        the records no predicate accepts (else they are dropped)."""
        if not predicates:
            raise DataflowError("branch needs at least one predicate")
        node = Node("branch", self._app._label("branch", self._origin),
                    fn=(tuple(predicates), default))
        self._node.children.append(node)
        outs = []
        for i in range(len(predicates) + (1 if default else 0)):
            route = Node("route", f"{node.label} [{i}]")
            node.children.append(route)
            outs.append(Stream(self._app, route, self._origin))
        return outs

    def merge(self, *others: Stream) -> Stream:
        """One stream of this one's records and each of ``others``' (the keys stay, so the
        records of a key may come from several streams)."""
        node = Node("merge", self._app._label("merge", self._origin))
        for stream in (self, *others):
            if stream._app is not self._app:
                raise DataflowError("merge: every stream must belong to the same App")
            stream._node.children.append(node)
        return Stream(self._app, node, self._origin)

    # ---- re-keying ------------------------------------------------------------------------
    def key_by(self, name: str, fn: Callable[[Any], Any]) -> Stream:
        """The records keyed by ``fn(value)``: they go through an internal topic
        (``<job.name>-<job.id>-<name>-repartition``, partitioned by the new key) written in
        the task's transaction and read ``read_committed``, so the state downstream is keyed
        by the new key and exact under every guarantee."""
        node = Node("key_by", name, fn=fn, name=name)
        self._app._check_name(name, node)
        self._node.children.append(node)
        source = Node("source", f"repartition {name}", name=name)
        self._app.repartitions[name] = source
        return Stream(self._app, source, f"{name} (re-keyed)")

    # ---- keyed state ----------------------------------------------------------------------
    def stateful_map(self, name: str, fn: Callable[[Any, Any], tuple[Any, Any]]) -> Stream:
        """``fn(state, value) -> (new_state, output)`` with the key's state (None at first);
        a new state of None deletes it. Emits each output (Bytewax's and Malstrom's shape)."""
        return self._add("stateful_map", fn, name)

    def process(self, name: str, on_record: Callable[[Any, Any], None],
                on_timer: Callable[[Any, Any], None] | None = None) -> Stream:
        """The keyed low-level operator (Flink's ``KeyedProcessFunction``):
        ``on_record(ctx, value)`` for each record and ``on_timer(ctx, timer)`` for each timer
        that fires. ``ctx`` (:class:`~millpond.streams.runtime.Context`) has the ``key``, its
        ``state`` (read it, assign it; None deletes), the ``timestamp``, ``emit(value)``,
        ``set_timer(time, processing_time=False)``, ``cancel_timer``, ``stream_time`` and
        ``now()``. State lives in store ``name``, timers in store ``<name>-timers``; both are
        committed with the input offsets, so a timer fires once in effect."""
        if not callable(on_record) or (on_timer is not None and not callable(on_timer)):
            raise DataflowError(f"process {name!r}: on_record and on_timer must be functions")
        return self._add("process", (on_record, on_timer), name)

    def aggregate(self, name: str, aggregation: Aggregation) -> Stream:
        """Fold each key's values with ``aggregation``; emits the key's new result."""
        return self._add("aggregate", aggregation, name)

    def count(self, name: str) -> Stream:
        """Each key's count so far."""
        return self.aggregate(name, aggs.count())

    def sum(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> Stream:
        """Each key's sum of ``by(value)``."""
        return self.aggregate(name, aggs.total(by))

    def min(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> Stream:
        """Each key's smallest ``by(value)``."""
        return self.aggregate(name, aggs.minimum(by))

    def max(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> Stream:
        """Each key's largest ``by(value)``."""
        return self.aggregate(name, aggs.maximum(by))

    def mean(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> Stream:
        """Each key's mean of ``by(value)``."""
        return self.aggregate(name, aggs.mean(by))

    def reduce(self, name: str, fn: Callable[[Any, Any], Any]) -> Stream:
        """Each key's ``fn(accumulated, value)``, from its first value."""
        return self.aggregate(name, aggs.reduce(fn))

    def fold(self, name: str, init: Callable[[], Any], add: Callable[[Any, Any], Any]) -> Stream:
        """Each key's ``add(state, value)``, from ``init()``."""
        return self.aggregate(name, aggs.fold(init, add))

    def agg(self, name: str, **named: Aggregation) -> Stream:
        """Several aggregations at once in one store: emits a dict of their results,
        e.g. ``agg("stats", n=count(), spent=total(lambda v: v["amount"]))``."""
        if not named:
            raise DataflowError(f"agg {name!r} needs at least one aggregation")
        return self.aggregate(name, aggs.several(named))

    # ---- joins ----------------------------------------------------------------------------
    def join(self, table: Table, fn: Callable[[Any, Any], Any], *, how: str = "inner",
             key: Callable[[Any], Any] | None = None) -> Stream:
        """Each record joined with ``table``'s current value for its key:
        ``fn(value, table_value)``. ``how="inner"`` drops records whose key the table does
        not have; ``"left"`` calls ``fn(value, None)`` for them. A lookup, not a windowed
        join: the table's value is whatever its topic's records, read before this one by the
        same task, made it (for a global table: every partition's, caught up at start and
        followed since). With a global table, ``key(value)`` may give the key to look up
        instead of the record's (Kafka Streams' ``KeyValueMapper``; None finds nothing); the
        output keeps the record's key."""
        if not isinstance(table, Table) or table.node.kind not in ("table", "global_table"):
            raise DataflowError("join: the first argument must be a table (app.table(...) "
                                "or app.global_table(...))")
        if how not in ("inner", "left"):
            raise DataflowError(f"join: how={how!r}; it is 'inner' or 'left'")
        if key is not None and table.node.kind != "global_table":
            raise DataflowError(f"join: key= needs a global table (app.global_table): task N "
                                f"holds only partition N of table {table.name!r}, so it is "
                                "looked up by the record's key")
        if not callable(fn) or (key is not None and not callable(key)):
            raise DataflowError("join: fn (of value, table value) and key (of value) must be "
                                "functions")
        return self._add("join", (table.name, fn, how == "left", key))

    def join_asof(self, table: Table, fn: Callable[[Any, Any], Any], *, how: str = "inner",
                  timestamp: Callable[[Any], int] | None = None) -> Stream:
        """Each record joined with ``table``'s (an :meth:`App.versioned_table`) value for its
        key as of the record's time (its timestamp, or ``timestamp(value)``): the latest
        version at or before it, ``fn(value, table_value)``. ``how="inner"`` drops records
        with none (no version yet, a deletion, or a time before the table's kept history),
        ``"left"`` calls ``fn(value, None)``. As with :meth:`join`, the table holds the
        versions its task has read before the record."""
        if not isinstance(table, Table) or table.node.kind != "versioned_table":
            raise DataflowError("join_asof: the first argument must be a versioned table "
                                "(app.versioned_table(topic, name, retention_ms))")
        if how not in ("inner", "left"):
            raise DataflowError(f"join_asof: how={how!r}; it is 'inner' or 'left'")
        if not callable(fn) or (timestamp is not None and not callable(timestamp)):
            raise DataflowError("join_asof: fn (of value, table value) and timestamp (of "
                                "value) must be functions")
        spec: asof.VersionedSpec = table.node.fn
        return self._add("join_asof", (table.name, fn, how == "left", timestamp,
                                       spec.retention))

    def window_join(self, name: str, other: Stream, within_ms: int,
                    fn: Callable[[Any, Any], Any], *, how: str = "inner", grace_ms: int = 0,
                    timestamp: Callable[[Any], int] | None = None,
                    late_to: str | None = None) -> Stream:
        """Join this stream's records (left) with ``other``'s (right) of the same key whose
        event times differ by at most ``within_ms``: ``fn(left, right)`` for each pair, once,
        when the second of the two comes (its timestamp: the later one's). ``how="left"``
        also sends ``fn(left, None)`` for a left record that found no match by the time it
        expires (stream time past its time + ``within_ms`` + ``grace_ms``), ``"outer"``
        ``fn(None, right)`` for such right records too. Both sides wait in store ``name``;
        records that come after their window expired are late (counted, dropped or sent to
        ``late_to``). The streams must be keyed and partitioned alike."""
        self._check_other("window_join", name, other)
        return self._two_sided(name, other, windows.window_join(
            within_ms, grace_ms, fn, how, timestamp, self._late(late_to)))

    def interval_join(self, name: str, other: Stream, lower_ms: int, upper_ms: int,
                      fn: Callable[[Any, Any], Any], *, how: str = "inner", grace_ms: int = 0,
                      timestamp: Callable[[Any], int] | None = None,
                      late_to: str | None = None) -> Stream:
        """Flink's interval join: a record of this stream (left) at time ``t`` joins
        ``other``'s (right) records of the same key at times in
        ``[t + lower_ms, t + upper_ms]`` (both ends included; either may be negative,
        ``lower_ms <= upper_ms``): ``fn(left, right)`` for each pair, once, when the second of
        the two comes (its timestamp: the later one's). ``window_join(within)`` is
        ``interval_join(-within, within)``; ``how``, ``grace_ms``, ``timestamp`` and
        ``late_to`` are as there: a left record waits until the right side's stream time
        passes ``t + upper_ms + grace_ms``, a right record at ``t`` until the left side's
        passes ``t - lower_ms + grace_ms``, and unmatched ones then go out for left and
        outer joins."""
        self._check_other("interval_join", name, other)
        return self._two_sided(name, other, windows.interval_join(
            name, lower_ms, upper_ms, grace_ms, fn, how, timestamp, self._late(late_to)))

    def _check_other(self, op: str, name: str, other: Any) -> None:
        if not isinstance(other, Stream) or other._app is not self._app:
            raise DataflowError(f"{op} {name!r}: other must be a stream of the same App")

    def _two_sided(self, name: str, other: Stream, spec: windows.JoinSpec) -> Stream:
        """The join operator ``name``: this stream feeds its left side, ``other`` its right,
        one store, and both sides feed what follows."""
        out = self._add("window_join", spec, name)
        right = Node("window_join_right", f"{name} (right side)", fn=spec, name=name)
        right.children = out._node.children  # both sides feed what follows the join
        other._node.children.append(right)
        out._node.fn = spec
        self._app.join_sides[name] = right
        return out

    # ---- windows --------------------------------------------------------------------------
    def tumbling_window(self, size_ms: int, *, grace_ms: int = 0,
                        timestamp: Callable[[Any], int] | None = None,
                        late_to: str | None = None,
                        idle_close_ms: int | None = None) -> WindowedStream:
        """Fixed windows of ``size_ms`` ([0, size), [size, 2 size) ...) per key, by event time:
        the record's Kafka timestamp, or ``timestamp(value)`` (ms). A window closes when the
        operator's stream time reaches its end plus ``grace_ms``; a record whose window has
        closed is late: counted and dropped, or sent to topic ``late_to``. With
        ``idle_close_ms``, a stream time that has not moved for that long on the wall clock
        moves on with it (so a quiet input's last windows close; a replay may then close
        them at other records). Aggregate it, then ``.final()`` or ``.current()``::

            views.tumbling_window(60_000).count("views-per-minute").final().to("minutes")
        """
        return windows.tumbling(self, size_ms, grace_ms, timestamp, self._late(late_to),
                                idle_close_ms)

    def hopping_window(self, size_ms: int, step_ms: int, *, grace_ms: int = 0,
                       timestamp: Callable[[Any], int] | None = None,
                       late_to: str | None = None,
                       idle_close_ms: int | None = None) -> WindowedStream:
        """Windows of ``size_ms`` starting every ``step_ms`` (a record belongs to
        ``size_ms / step_ms`` of them), otherwise as :meth:`tumbling_window`."""
        return windows.hopping(self, size_ms, step_ms, grace_ms, timestamp,
                               self._late(late_to), idle_close_ms)

    def sliding_window(self, size_ms: int, *, grace_ms: int = 0,
                       timestamp: Callable[[Any], int] | None = None,
                       late_to: str | None = None) -> WindowedStream:
        """Sliding windows per key (Kafka Streams' ``SlidingWindows``' windows that end at a
        record): each distinct time ``t`` of a key's records defines the window
        ``[t - size_ms, t]``, both ends included, of the key's records at those times, so
        every set of records within ``size_ms`` of the latest one gets one result. It closes
        when stream time passes ``t + grace_ms``; ``final()`` then sends its result
        (timestamped ``t``), ``current()`` sends it after each record it takes. A record
        whose own window has closed is late (it updates no window). Results are
        ``{"start": max(0, t - size_ms), "end": t, "value": ...}``. The key's records wait
        in the store until stream time passes ``t + size_ms + grace_ms``."""
        return windows.sliding(self, size_ms, grace_ms, timestamp, self._late(late_to))

    def session_window(self, gap_ms: int, *, grace_ms: int = 0,
                       timestamp: Callable[[Any], int] | None = None,
                       late_to: str | None = None,
                       idle_close_ms: int | None = None) -> WindowedStream:
        """Sessions per key: records less than ``gap_ms`` apart belong to one session
        ``[start, end]`` (``end``: its last record's time), which closes when stream time
        reaches ``end + gap_ms + grace_ms``; a record that bridges two sessions merges them.
        Otherwise as :meth:`tumbling_window`."""
        return windows.session(self, gap_ms, grace_ms, timestamp, self._late(late_to),
                               idle_close_ms)

    def tumbling_count_window(self, size: int) -> WindowedStream:
        """Windows of each key's next ``size`` records (no time: nothing is late). A final
        result goes out when a window has its ``size`` records; ``start`` and ``end`` are the
        timestamps of its first and last record."""
        return windows.count_window(self, size, size)

    def hopping_count_window(self, size: int, step: int) -> WindowedStream:
        """Windows of ``size`` records of a key, one starting every ``step`` records."""
        return windows.count_window(self, size, step)

    def _late(self, topic: str | None) -> str | None:
        if topic is not None:
            self._app.sinks.add(topic)
        return topic

    # ---- composing ------------------------------------------------------------------------
    def pipe(self, operator: Callable[..., Stream], *args: Any, **kwargs: Any) -> Stream:
        """``operator(self, *args, **kwargs)``: apply an operator written as a function of a
        stream (built from these methods), so it chains like the built-in ones::

            def dedupe(stream, name):
                ...
                return stream.process(name, first_only)

            views.pipe(dedupe, "seen").count("counts")
        """
        out = operator(self, *args, **kwargs)
        if not isinstance(out, Stream):
            raise DataflowError(f"pipe: {getattr(operator, '__name__', operator)!r} returned "
                                f"a {type(out).__name__}, not a Stream")
        return out

    # ---- sinks ----------------------------------------------------------------------------
    def to(self, topic: str, key: Callable[[Any], Any] | None = None) -> None:
        """Send every record to ``topic`` (its serdes: the job's stream or system serdes;
        its partition: the job's partitioner on the key), in the task's transaction, with
        its timestamp. ``key``: the output's key is ``key(value)`` instead of the record's
        (a sink needs no repartition, unlike :meth:`key_by`)."""
        self._app.sinks.add(topic)
        self._add("to", fn=key, topic=topic)
