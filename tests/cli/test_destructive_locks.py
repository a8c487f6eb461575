"""Destructive commands lock every store they would touch before touching any (issue #35).

``restore --full`` used to delete a running task's live store directory and its last
commit's checkpoint and only then find the lock held, killing the job. Now ``restore
--full`` and ``restore --from-local``, run while the job runs, exit 2 with one line naming
the job's pid and saying nothing changed, and the job finishes with exact state.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    MILLPOND,
    REPO,
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    run_job,
    start_job,
    wait_for_line,
    write_properties,
)

# 35-45 s each measured at a load average of ~30 on 2 cores: marked slow, run by make test-slow.
pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_restore_while_the_job_runs_changes_nothing(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 200, 20, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state",
                         **{"task.class": "tests.jobs.counting.SlowCounter"})
    conf = write_properties(tmp_path / "job.properties", props)
    first = run_job(conf, "--bounded", timeout=90)
    assert first.returncode == 0, first.stderr[-3000:]
    expected += produce_users(kafka_bootstrap, source, 400, 20, 2)

    # Slow enough (~12 s of processing) to still run while both commands are refused.
    proc = start_job(conf, "--bounded", env={"MILLPOND_TEST_DELAY": "0.03"})
    try:
        wait_for_line(proc, "ready", timeout=90)
        refused = {args: subprocess.Popen(
            [MILLPOND, *args, "--config", str(conf)], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
            for args in (("restore", "--full"), ("restore", "--from-local"))}
        for args, cmd in refused.items():
            _, err = cmd.communicate(timeout=120)
            lines = err.strip().splitlines()
            assert cmd.returncode == 2 and len(lines) == 1, (args, err)
            assert lines[0].startswith(f"Error: {' '.join(args)}: nothing changed: store "
                                       f"directory {tmp_path / 'state' / name}"), lines
            assert f"is in use by pid {proc.pid};" in lines[0], lines
        assert proc.poll() is None, "the job ended before the commands ran: slow it down"
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    assert dump_store(conf, "counts") == dict(expected)
    # With the job stopped, the same restore works and leaves the same state.
    full = millpond("restore", "--config", str(conf), "--full")
    assert full.returncode == 0, full.stderr
    assert dump_store(conf, "counts") == dict(expected)

