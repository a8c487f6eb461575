"""One job's client settings are built once (millpond.job.Job) and every client gets them:
``systems.<s>.<librdkafka key>`` is written once for all clients, ``consumer.*`` and
``producer.*`` win for their client, and the bulk readers use a group id of the job's own."""

from __future__ import annotations

import pytest

from millpond.config import Config
from millpond.config.properties import parse_properties
from millpond.job import CLIENT_DEFAULTS, Job
from millpond.kafka.clients import SETTINGS_SOURCE

BASE = """\
job.name=counts
job.id=7
task.class=tests.jobs.counting.Counter
task.inputs=kafka.in
systems.kafka.bootstrap.servers=127.0.0.1:1
"""


MEMORY_PLAN_KEYS = ("queued.max.messages.kbytes", "queued.min.messages",
                    "max.partition.fetch.bytes", "queue.buffering.max.kbytes")


def job(extra: str) -> Job:
    return Job(Config.from_properties(parse_properties(BASE + extra, "job.properties")))


def test_security_settings_written_once_reach_every_client() -> None:
    j = job("systems.kafka.security.protocol=SASL_SSL\n"
            "systems.kafka.sasl.mechanism=SCRAM-SHA-512\n"
            "systems.kafka.sasl.username=alice\n"
            "systems.kafka.ssl.ca.location=/etc/ca.pem\n")
    shared = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": "alice", "ssl.ca.location": "/etc/ca.pem"}
    for conf in (j.client_conf, j.consumer_conf, j.producer_conf):  # admin: client_conf
        assert shared.items() <= conf.items(), conf
        assert conf["bootstrap.servers"] == "127.0.0.1:1"


def test_a_client_setting_wins_over_the_shared_one_for_its_client_only() -> None:
    j = job("systems.kafka.client.id=shared\n"
            "systems.kafka.consumer.client.id=mine\n")
    assert j.consumer_conf["client.id"] == "mine"
    assert j.producer_conf["client.id"] == "shared"
    assert j.client_conf["client.id"] == "shared"


def test_keys_that_are_no_librdkafka_setting_stay_out_of_the_clients() -> None:
    j = job("systems.kafka.samza.factory=org.apache.samza.system.kafka.KafkaSystemFactory\n"
            "systems.kafka.samza.key.serde=string\n"
            "systems.kafka.my.own.setting=1\n"
            "systems.kafka.streams.in.samza.msg.serde=json\n"
            "systems.kafka.default.stream.replication.factor=1\n")
    for conf in (j.client_conf, j.consumer_conf, j.producer_conf):
        assert set(conf) - {"partitioner", "error_cb", "logger", SETTINGS_SOURCE,
                            *CLIENT_DEFAULTS,
                            *MEMORY_PLAN_KEYS} == {"bootstrap.servers"}, conf


def test_the_memory_plan_bounds_the_client_buffers_unless_a_key_does() -> None:
    j = job("job.container.memory.mb=384\n")
    assert j.consumer_conf["queued.max.messages.kbytes"] == j.memory.input_prefetch // 1024
    # ... and their count: one a KiB of the share (librdkafka's 100,000 small messages
    # cost ~45 MiB more than their payload); the restore consumer's from its own share
    assert j.consumer_conf["queued.min.messages"] == j.memory.input_prefetch // 1024 == 12_233
    restore = j.restore_conf()
    assert restore["queued.min.messages"] == j.memory.restore_prefetch // 1024 == 12_233
    assert restore["queued.max.messages.kbytes"] == j.memory.restore_prefetch // 1024
    # one partition's fetch response: an eighth of the share (tiny records cost ~450 B
    # each), at most librdkafka's 1 MiB
    assert j.consumer_conf["max.partition.fetch.bytes"] == 1_048_576
    small = job("job.container.memory.mb=128\n")
    assert small.consumer_conf["max.partition.fetch.bytes"] == small.memory.input_prefetch // 8
    # ... not the whole fetch's: one of 1 MiB across 4 partitions drained them one by one
    assert "fetch.max.bytes" not in j.consumer_conf
    many = job("systems.kafka.consumer.max.partition.fetch.bytes=4194304\n")
    assert many.restore_conf()["fetch.max.bytes"] == 4_194_304  # never under one partition's
    tight = job("systems.kafka.consumer.receive.message.max.bytes=1100000\n")
    restore_tight = tight.restore_conf()  # under it by 512, a partition's within it
    assert restore_tight["fetch.max.bytes"] == restore_tight["max.partition.fetch.bytes"] \
        == 1_100_000 - 512
    # the restore consumer's own responses: a quarter of its prefetch share (1-4 MiB), half
    # that a partition (librdkafka makes each record of a response a ~450 B op)
    assert (restore["fetch.max.bytes"], restore["max.partition.fetch.bytes"]) == (
        j.memory.restore_fetch_bytes, j.memory.restore_partition_fetch_bytes)
    assert small.restore_conf()["fetch.max.bytes"] == 1_048_576  # never under one message
    big = job("systems.kafka.consumer.message.max.bytes=8388608\n")
    assert big.restore_conf()["fetch.max.bytes"] == 8_388_608
    assert job("systems.kafka.consumer.fetch.max.bytes=2000000\n").restore_conf()[
        "fetch.max.bytes"] == "2000000"
    # the whole producer share; each task producer gets 1/N of it (task_producer_conf)
    assert j.producer_conf["queue.buffering.max.kbytes"] == j.memory.producer_buffer // 1024
    mine = job("job.container.memory.mb=384\n"
               "systems.kafka.consumer.queued.max.messages.kbytes=2048\n"
               "systems.kafka.producer.queue.buffering.max.kbytes=4096\n")
    assert mine.consumer_conf["queued.max.messages.kbytes"] == "2048"
    assert mine.consumer_conf["queued.min.messages"] == 2048  # one a KiB of the user's
    count = job("systems.kafka.consumer.queued.min.messages=5000\n"
                "systems.kafka.consumer.max.partition.fetch.bytes=65536\n")
    assert count.consumer_conf["max.partition.fetch.bytes"] == "65536"
    assert count.restore_conf()["max.partition.fetch.bytes"] == "65536"
    assert count.consumer_conf["queued.min.messages"] == "5000"
    assert count.restore_conf()["queued.min.messages"] == "5000"
    assert mine.producer_conf["queue.buffering.max.kbytes"] == "4096"
    assert "your systems.kafka.producer. key" in mine.memory.render()


def test_every_client_reports_its_failed_connections_to_the_job() -> None:
    """Each client's error callback and librdkafka log listener are the job's faults: a
    wrong CA or protocol (only logged by librdkafka) is noticed whichever client meets it."""
    j = job("systems.kafka.ssl.ca.location=/etc/ca.pem\n")
    for conf in (j.client_conf, j.consumer_conf, j.producer_conf):
        assert conf["error_cb"] == j.faults.on_client_error
        assert conf["logger"].listener == j.faults.on_log
    assert j.faults.ca_location == "/etc/ca.pem"


def test_readers_use_a_group_id_of_the_job() -> None:
    """No group shared by every job (``millpond-restore`` was): an ACL on the job's prefix
    covers the readers' group too."""
    j = job("")
    assert j.group_id == "counts-7"
    assert j.reader_group_id.startswith("counts-7-")


def test_exactly_once_commits_every_100_ms_unless_told_otherwise() -> None:
    """Outputs read read_committed are visible at commits: Samza's 60 s default would hold
    them 30 s on average, so exactly-once defaults to Kafka Streams' 100 ms there."""
    def commit_ms(extra: str) -> int:
        config = Config.from_properties(parse_properties(BASE + extra, "job.properties"))
        return config.job.commit_ms

    assert commit_ms("task.processing.guarantee=exactly-once\n") == 100
    assert commit_ms("task.processing.guarantee=exactly-once\ntask.commit.ms=\n") == 100
    assert commit_ms("task.processing.guarantee=exactly-once\ntask.commit.ms=5000\n") == 5000
    assert commit_ms("task.processing.guarantee=effectively-once\n") == 60_000
    assert commit_ms("task.processing.guarantee=at-least-once\n") == 60_000
    assert commit_ms("") == 60_000


def test_settings_librdkafka_refuses_name_their_lines() -> None:
    """A value librdkafka refuses, or two settings that disagree, stop the command with
    one line naming each cited setting's file and line (it was a traceback)."""
    from millpond.kafka.errors import ClientSettingsError
    from millpond.kafka.producer import TrackedProducer

    j = job("systems.kafka.consumer.fetch.max.bytes=1000\n")
    with pytest.raises(ClientSettingsError) as refused:
        j.consumer()
    text = str(refused.value)
    assert "`fetch.max.bytes` must be >= `message.max.bytes`" in text, text
    assert "job.properties:6: systems.kafka.consumer.fetch.max.bytes" in text, text
    assert "message.max.bytes: not set in the config" in text, text
    assert refused.value.exit_code == 2

    shared = job("systems.kafka.linger.ms=soon\n")
    with pytest.raises(ClientSettingsError, match=r"job\.properties:6: systems\.kafka\."
                                                  r"linger\.ms\)"):
        TrackedProducer(shared.producer_conf)
    # the consumer's own key is named, not the shared one it overrides
    both = job("systems.kafka.session.timeout.ms=10000\n"
               "systems.kafka.consumer.session.timeout.ms=soon\n")
    assert both.setting_source("consumer", "session.timeout.ms") == \
        "job.properties:7: systems.kafka.consumer.session.timeout.ms"
    assert both.setting_source("producer", "session.timeout.ms") == \
        "job.properties:6: systems.kafka.session.timeout.ms"
    assert both.setting_source("consumer", "linger.ms") is None
    assert SETTINGS_SOURCE in both.consumer_conf
