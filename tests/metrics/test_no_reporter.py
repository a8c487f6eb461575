"""Without ``metrics.reporters`` nothing is started: a running job listens on no TCP port
(with the Prometheus reporter the same job listens on exactly the one it prints)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    counting_job,
    create_topic,
    produce_users,
    start_job,
    stop_job,
    write_properties,
)
from tests.metrics.test_prometheus_scrape import URL_LINE, Lines

pytestmark = pytest.mark.kafka

LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process ``pid`` listens on (its socket inodes in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if m := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(m.group(1))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.parametrize("reporter", [False, True])
def test_a_job_listens_only_when_a_reporter_is_configured(
    reporter: bool, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = topic_name("in")
    create_topic(kafka_bootstrap, topic, 2)
    produce_users(kafka_bootstrap, topic, 200, 10, 2)
    props = counting_job(kafka_bootstrap, topic_name("job"), topic, tmp_path / "state")
    if reporter:
        props.update({"metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0})
    job = start_job(write_properties(tmp_path / "job.properties", props))
    try:
        out = Lines(job)
        # running: both tasks open (each logs its ready line)
        out.wait_for(re.compile(r" ready: restored [^\n]*\n(?:.*\n)*?.* ready: restored "), timeout=60)
        ports = listening_ports(job.pid)
        if reporter:
            url = URL_LINE.search(out.text())
            assert url, out.text()[-2000:]
            assert ports == {int(url.group(1).split(":")[2].split("/")[0])}
        else:
            assert ports == set(), out.text()[-2000:]
            assert "Prometheus" not in out.text()
    finally:
        stop_job(job)
