"""A stream-table lookup join run by `millpond run`: the table's store is an ordinary store
(dumped by `millpond store dump`), its updates and deletes reach later records."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import create_topic, read_topic, run_job
from tests.streams.test_app_job import _config, _dump

pytestmark = pytest.mark.kafka


def test_views_join_the_latest_profile(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    profiles, views, out = topic_name("profiles"), topic_name("views"), topic_name("out")
    for topic in (profiles, views, out):
        create_topic(kafka_bootstrap, topic, 2)
    (tmp_path / "join_app.py").write_text(
        "from millpond.streams import App\n"
        "app = App()\n"
        f"zips = app.table({profiles!r}, 'user-zips')\n"
        f"(app.source({views!r}).join(zips, lambda v, p: {{**v, 'zip': p['zip']}})"
        f".to({out!r}))\n")
    conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                   tmp_path / "state", **{"app.class": "join_app:app",
                                          "task.processing.guarantee": "exactly-once"})
    env = {"PYTHONPATH": str(tmp_path)}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def send(topic: str, records: list[tuple[str, object]]) -> None:
        for user, value in records:
            producer.produce(topic, None if value is None else json.dumps(value), user,
                             partition=int(user[-1]) % 2)
        assert producer.flush(30) == 0

    users = [f"user-{i}" for i in range(6)]
    send(profiles, [(u, {"zip": f"z{i}"}) for i, u in enumerate(users)])
    assert run_job(conf, "--bounded", env=env, timeout=120).returncode == 0
    send(views, [(u, {"n": 1}) for u in users])
    assert run_job(conf, "--bounded", env=env, timeout=120).returncode == 0
    # (the records of two topics interleave as the consumer fetches them: a view and a
    # profile change pending together may come in either order, so each run has one kind)
    send(profiles, [(users[0], {"zip": "moved"}), (users[1], None)])
    assert run_job(conf, "--bounded", env=env, timeout=120).returncode == 0
    send(views, [(u, {"n": 2}) for u in users[:3]])
    done = run_job(conf, "--bounded", env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    joined = sorted(((m.key().decode(), json.loads(m.value())) for m in read_topic(
        kafka_bootstrap, out)), key=repr)
    assert joined == sorted([(u, {"n": 1, "zip": f"z{i}"}) for i, u in enumerate(users)]
                            + [(users[0], {"n": 2, "zip": "moved"}),
                               (users[2], {"n": 2, "zip": "z2"})], key=repr)
    assert _dump(conf, env, "user-zips") == {
        u: {"zip": "moved" if i == 0 else f"z{i}"} for i, u in enumerate(users) if i != 1}
