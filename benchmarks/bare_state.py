"""A bare loop over the same libraries as the count: consume, decode, and count through
millpond's store stack, with nothing else of millpond's runtime.

Per message: the record's key (utf-8) and value (orjson) decoded, then ``get`` and ``put``
of the key's count through the stack a job's store has (NullSafe -> Cached -> Serialized ->
RocksDB engine, one store per partition, the default object cache), with no changelog, no
commits, no run loop and no operator chain. It is the ceiling of any count that keeps its state
in those stores: what the dataflow count's share of the consume + JSON-decode ceiling can reach
at most (issue #29). ``--dict`` counts in a plain dict instead (the decode ceiling plus the
cheapest state there is). benchmarks/bare_loops.py has the same loop with a one-layer
store, an envelope per message and a write-down (issue #14); this one runs inside the
dataflow workload, each round. Needs a broker and a topic of JSON records:

    .venv/bin/python -m benchmarks.bare_state TOPIC [--bootstrap 127.0.0.1:9092] [--dict]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS
from millpond.serdes.builtins import JsonSerde, StringSerde
from millpond.stores.engines.rocksdb import RocksDbEngine
from millpond.stores.factory import build_stack


def count_through_stores(bootstrap: str, topic: str, plain_dict: bool = False,
                         timeout_s: float = 600) -> dict[str, Any]:
    """Read ``topic`` from the beginning to its end, counting each record key's records in
    a store per partition (in a temporary directory) or a dict; returns the rate as
    ``data.consume_all`` does, with ``keys`` and ``counted`` (the sum of the counts, read
    back) as a check."""
    with tempfile.TemporaryDirectory(prefix="millpond-bare-") as root:
        return _count(bootstrap, topic, Path(root), plain_dict, timeout_s)


def _count(bootstrap: str, topic: str, root: Path, plain_dict: bool,
           timeout_s: float) -> dict[str, Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-bare-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    parts = [TopicPartition(topic, p, 0)
             for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions]
    remaining = {p.partition for p in parts}
    stacks = {} if plain_dict else {
        p.partition: build_stack("counts", RocksDbEngine(root / f"p{p.partition}"),
                                 StringSerde(), JsonSerde())
        for p in parts}
    dicts: dict[int, dict[str, int]] = {p.partition: {} for p in parts}
    loads, decode = orjson.loads, bytes.decode
    count = nbytes = 0
    began = None
    consumer.assign(parts)
    deadline = time.monotonic() + timeout_s
    try:
        while remaining and time.monotonic() < deadline:
            msgs = consumer.consume(1000, 0.5)
            if began is None and msgs:
                began = time.perf_counter()
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        remaining.discard(msg.partition())
                        continue
                    raise RuntimeError(msg.error().str())
                raw_key, value = msg.key(), msg.value()
                nbytes += len(value or b"") + len(raw_key or b"")
                key = decode(raw_key)
                loads(value)
                if plain_dict:
                    d = dicts[msg.partition()]  # type: ignore[index]
                    d[key] = d.get(key, 0) + 1
                else:
                    store = stacks[msg.partition()].store  # type: ignore[index]
                    n = store.get(key)
                    store.put(key, 1 if n is None else n + 1)
                count += 1
        ended = time.perf_counter()
        if plain_dict:
            counted, keys = sum(sum(d.values()) for d in dicts.values()), sum(map(len, dicts.values()))
        else:
            counted = keys = 0
            for stack in stacks.values():
                with stack.store.all() as it:
                    for _, n in it:
                        counted += n
                        keys += 1
    finally:
        consumer.close()
        for stack in stacks.values():
            stack.store.close()
    if remaining:
        raise RuntimeError(f"did not reach the end of {topic} partitions {sorted(remaining)}")
    elapsed = ended - (began or ended)
    return {"records": count, "bytes": nbytes, "seconds": elapsed,
            "msgs_per_s": count / elapsed if elapsed else 0.0,
            "mb_per_s": nbytes / 1e6 / elapsed if elapsed else 0.0,
            "keys": keys, "counted": counted,
            "state": "dict" if plain_dict else "store stack (null-safe, cached, serialized, "
                                                "RocksDB; no changelog, no commits)"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topic")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--dict", action="store_true", help="count in a plain dict instead")
    a = p.parse_args()
    print(json.dumps(count_through_stores(a.bootstrap, a.topic, plain_dict=a.dict), indent=1))


if __name__ == "__main__":
    main()
