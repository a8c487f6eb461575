"""The process memory budget (job.container.memory.mb): how it is divided, what a user's keys
change, and the shared RocksDB cache and write-buffer manager every store then uses."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from millpond.config import Config, ConfigError
from millpond.config.memory import DEFAULT_BUDGET_MB, MiB, plan_memory
from millpond.config.properties import parse_properties
from millpond.stores import RocksDbEngine, RocksDbOptions
from millpond.stores.engines.rocksdb_options import use_process_memory

BASE = ("job.name=j\ntask.class=a.B\ntask.inputs=kafka.t\n"
        "systems.kafka.bootstrap.servers=h:9092\n"
        "stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n")


def plan(extra: str = ""):  # type: ignore[no-untyped-def]
    return Config.from_properties(parse_properties(BASE + extra, "job.properties")).memory


def test_the_default_is_one_1_gb_process_whatever_the_tasks_and_stores() -> None:
    p = plan()
    assert p.budget == DEFAULT_BUDGET_MB * MiB == 1024 * MiB
    assert "default" in p.source
    assert p.block_cache == int(0.40 * p.budget) and p.write_buffers == p.block_cache // 3
    assert p.memtable == 32 * MiB  # Samza's memtable size fits a 1 GB process
    assert p.object_caches == int(0.15 * p.budget)
    assert p.headroom >= 0.25 * p.budget
    assert sum(part.bytes for part in p.parts() if not part.name.startswith(" ")) == p.budget


def test_a_384_mb_budget_and_samzas_key() -> None:
    p = plan("job.container.memory.mb=384\n")
    assert p.budget == 384 * MiB and p.source == "job.container.memory.mb=384"
    assert p.memtable == p.write_buffers // 3 < 32 * MiB
    samza = plan("cluster-manager.container.memory.mb=384\n")
    assert samza.budget == 384 * MiB and samza.source.startswith("cluster-manager.")
    both = plan("cluster-manager.container.memory.mb=2048\njob.container.memory.mb=384\n")
    assert both.budget == 384 * MiB  # millpond's key wins


def test_a_budget_below_the_minimum_names_its_line() -> None:
    with pytest.raises(ConfigError, match=r"job.properties:8.*job.container.memory.mb"):
        plan("job.container.memory.mb=64\n")


def test_the_plan_lists_what_the_users_keys_changed() -> None:
    p = plan("job.container.memory.mb=512\nstores.s.container.cache.size.bytes=8388608\n"
             "stores.s.object.cache.max.bytes=1048576\n")
    text = p.render()
    assert "memory budget 512.0 MiB (job.container.memory.mb=512)" in text
    assert "stores.s.container.cache.size.bytes" in text and "outside the budget" in text
    assert "stores.s.object.cache.max.bytes" in text
    for name in ("rocksdb block cache", "object caches", "restore batch", "producer buffers",
                 "python and headroom"):
        assert name in text
    assert plan_memory(parse_properties("job.name=j\n", "x.properties")).overrides == ()


def test_stores_share_one_block_cache_and_write_buffer_manager(tmp_path: Path) -> None:
    shared = use_process_memory(16 * MiB, 4 * MiB, 1 * MiB)
    own = RocksDbOptions.from_store_properties({"container.cache.size.bytes": str(MiB)})
    first = RocksDbOptions.from_store_properties({})
    assert first.shared is shared and first.shared_cache and first.write_buffer_size_bytes == MiB
    assert own.shared is shared and not own.shared_cache
    engines = [RocksDbEngine(tmp_path / f"s{i}", first) for i in range(3)]
    for engine in engines:
        engine.write_batch([(b"k%06d" % i, b"v" * 1000) for i in range(3000)])
    used_cache, used_buffers = shared.usage()
    assert 0 < used_buffers <= used_cache <= 16 * MiB  # three stores' memtables, one cache
    for engine in engines:
        engine.close()


def test_a_reopened_store_reads_into_the_shared_cache_with_its_bloom_filter(
        tmp_path: Path) -> None:
    """A store opened over an existing database (every restart) keeps its options: its
    blocks go to the process's shared cache, its memtables to the write-buffer manager, and
    its files keep the bloom filter. rocksdict used to reopen the default column family with
    default table options (a private 8 MB cache, no filter), outside the budget."""
    shared = use_process_memory(64 * MiB, 4 * MiB, 1 * MiB)
    options = RocksDbOptions.from_store_properties({})
    path = tmp_path / "s"
    engine = RocksDbEngine(path, options)
    values = [random.Random(i).randbytes(200) for i in range(20_000)]  # incompressible
    engine.write_batch([(b"k%06d" % i, values[i]) for i in range(20_000)])
    engine.close()  # flushed: the data is in files now
    before, _ = shared.usage()
    engine = RocksDbEngine(path, options)
    try:
        assert all(engine.get(b"k%06d" % i) == values[i] for i in range(0, 20_000, 7))
        after, buffers = shared.usage()
        assert after - before > 2 * MiB  # the blocks read are charged to the shared cache
        assert buffers > 0  # its memtable, charged to the write-buffer manager
        log = (path / "LOG").read_text()
        assert "filter_policy: bloomfilter" in log and "filter_policy: nullptr" not in log
    finally:
        engine.close()


def test_the_producer_share_is_for_all_task_producers_of_the_process() -> None:
    # A process can hold every task of the job: 4 tasks' producers together get the 6%,
    # not 6% each (which put 3 more producer buffers outside a 384 MB budget).
    from millpond.config.memory import PRODUCER_MIN
    from millpond.tasks.container import task_producer_conf

    p = plan("job.container.memory.mb=384\n")
    assert p.producer_buffer > 16 * MiB
    for tasks in (1, 4, 8):
        each = p.task_producer_buffer(tasks)
        assert each == p.producer_buffer // tasks and tasks * each <= p.producer_buffer
        conf = task_producer_conf({"bootstrap.servers": "h:9092"}, p, tasks)
        assert conf["queue.buffering.max.kbytes"] == each // 1024
        # ... and the count: one message a KiB (100,000 tiny records took +23 MiB)
        assert conf["queue.buffering.max.messages"] == max(1000, each // 1024)
    # Never under one message: librdkafka cannot queue a message larger than the buffer.
    assert p.task_producer_buffer(1000) == PRODUCER_MIN
    assert p.task_producer_buffer(1000, 4 * MiB) == 4 * MiB
    conf = task_producer_conf({"message.max.bytes": str(3 * MiB)}, p, 1000)
    assert conf["queue.buffering.max.kbytes"] == 3 * 1024
    # The user's own key is each producer's, as it is.
    mine = plan("job.container.memory.mb=384\n"
                "systems.kafka.producer.queue.buffering.max.kbytes=65536\n")
    assert mine.task_producer_buffer(8) == 64 * MiB
    conf = {"queue.buffering.max.kbytes": 65536}
    assert task_producer_conf(conf, mine, 8) == {**conf, "queue.buffering.max.messages": 65536}
    counted = {"queue.buffering.max.messages": 500}
    assert task_producer_conf(counted, mine, 8)["queue.buffering.max.messages"] == 500
    assert "all task producers" in p.render() and "your systems.kafka.producer." in mine.render()


def test_small_budgets_keep_160_mib_for_what_no_share_bounds() -> None:
    # 4 tasks x 2 stores under a 384 MB cap were OOM-killed with 25% (96 MiB) of headroom:
    # Python, librdkafka's threads and RocksDB outside its cache took 150-190 MiB.
    p = plan("job.container.memory.mb=384\n")
    assert p.headroom >= 160 * MiB and p.block_cache < int(0.40 * p.budget)
    assert sum(part.bytes for part in p.parts() if not part.name.startswith(" ")) == p.budget
    half = plan("job.container.memory.mb=256\n")
    assert half.headroom >= 128 * MiB  # half the budget where 160 MiB is more than half
    small = plan("job.container.memory.mb=96\n")
    assert 64 * MiB <= small.headroom < 70 * MiB  # the 64 MiB floor as before
    big = plan("job.container.memory.mb=1024\n")  # from 640 MB on, 25% is more: unchanged
    assert big.block_cache == int(0.40 * big.budget) and big.headroom >= 0.25 * big.budget


def test_the_restore_consumers_fetch_responses_are_a_quarter_of_its_prefetch() -> None:
    """librdkafka makes every record of a fetch response a ~450 B op, whatever its count
    bound: a 16 MiB response of small records took a restore ~100 MiB over its budget."""
    sizes = {mb: (p.restore_prefetch, p.restore_fetch_bytes, p.restore_partition_fetch_bytes)
             for mb in (96, 128, 256, 1024, 8192)
             for p in [plan(f"job.container.memory.mb={mb}\n")]}
    assert sizes[1024] == sizes[8192] == (16 * MiB, 4 * MiB, 2 * MiB)  # the cap
    assert sizes[256][1] == sizes[256][0] // 4 and sizes[256][2] == sizes[256][1] // 2
    assert sizes[128][1:] == sizes[96][1:] == (MiB, MiB // 2)  # at least one 1 MB message
    assert "4,096 KiB a fetch" in plan().render()


def test_one_input_fetch_response_carries_every_partition_within_one_partitions_share() -> None:
    """librdkafka queues every record of a fetch response at once (32 partitions of tiny
    records: +463 MiB against a 41 MiB share); a 1 MiB response of one partition drained 4
    partitions in turn. So the response is one partition's share, divided between them."""
    from millpond.tasks.container import input_fetch_conf

    p = plan()
    assert p.input_fetch(4) == (256 * 1024, MiB)
    assert p.input_fetch(32) == (64 * 1024, MiB)  # never under 64 KiB a partition
    assert p.input_fetch(1) == (MiB, MiB)
    small = plan("job.container.memory.mb=96\n")
    assert small.input_fetch(4) == (small.input_fetch_bytes, MiB)  # its share is smaller
    conf = input_fetch_conf({}, p, 4, user_fetch_bytes=False, user_fetch_max=False)
    assert (conf["max.partition.fetch.bytes"], conf["fetch.max.bytes"]) == (256 * 1024, MiB)
    mine = {"max.partition.fetch.bytes": "2097152", "fetch.max.bytes": "8388608"}
    assert input_fetch_conf(mine, p, 4, user_fetch_bytes=True, user_fetch_max=True) == mine
