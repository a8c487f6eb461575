"""A side-input job SIGKILLed inside a commit that moved input: the restart resumes each
task's side inputs at the offsets its last committed checkpoint names (not from the start),
reads only what came after them, and the store and the joins are exact."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.tasks.faults import CRASH_LOG
from tests.kafka_util import dump_store, run_job, write_properties
from tests.sideinputs.test_side_inputs import (
    PARTITIONS,
    Table,
    checkpointed_side_offsets,
    enriched,
    expect_views,
    job,
    produce_profiles,
    produce_views,
    profiles,
    side_ends,
    side_reads,
    topics,
)

pytestmark = pytest.mark.kafka


def test_sigkill_in_a_commit_then_side_inputs_resume_at_the_checkpoint(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    views, side, out = topics(kafka_bootstrap, topic_name)
    name = topic_name("job")
    table = profiles(range(40), 1)
    produce_profiles(kafka_bootstrap, side, table)
    produce_views(kafka_bootstrap, views, 0, 3000)
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, tmp_path / "state", "exactly-once",
        **{"task.commit.ms": 50}))

    # Killed after the local checkpoint of the second task commit that moved input.
    killed = run_job(config, "--bounded",
                     env={"MILLPOND_CRASH_AT": "after-local-checkpoint:2:moved"}, timeout=90)
    log = killed.stdout + killed.stderr
    assert killed.returncode == -signal.SIGKILL, f"exit {killed.returncode}:\n{log[-3000:]}"
    assert f"{CRASH_LOG} after-local-checkpoint (task " in log, log[-3000:]
    ends = side_ends(kafka_bootstrap, side)
    committed = checkpointed_side_offsets(kafka_bootstrap, name)
    assert committed == {p: {"profiles": {side: ends[p]}} for p in range(PARTITIONS)}, (
        f"the checkpoints must name the side-input offsets read: {committed}, ends {ends}")

    changes: Table = {**profiles(range(5), 2),
                      **dict.fromkeys((f"user-{u}" for u in range(5, 10)), None)}
    produce_profiles(kafka_bootstrap, side, changes)
    table2 = {u: p for u, p in {**table, **changes}.items() if p is not None}
    later = produce_views(kafka_bootstrap, views, 3000, 200)

    done = run_job(config, "--bounded", timeout=90)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    reads = side_reads(log)
    # Each task resumed at its checkpointed side-input offsets and read only the changes.
    assert {p: r[1] for p, r in reads.items()} == {
        p: committed[p]["profiles"] for p in range(PARTITIONS)}, reads
    new_ends = side_ends(kafka_bootstrap, side)
    read = sum(r[0] for r in reads.values())
    assert read == len(changes) == sum(new_ends.values()) - sum(ends.values()), reads
    assert "reading its side inputs again" not in log
    store = dump_store(config, "profiles")
    joined = enriched(kafka_bootstrap, out)
    assert set(joined) == set(range(3200)), "every view joined (read_committed)"
    late = {i: p for i, p in joined.items() if i >= 3000}
    wrong = sum(store.get(u) != p for u, p in table2.items()) + len(store.keys() - table2.keys())
    report("SIGKILL in a commit, side inputs (exactly-once)",
           f"kill after the local checkpoint of a commit that moved input; restart read "
           f"{read} side-input records after the checkpointed offsets",
           wrong, 0,
           "exact" if store == table2 and late == expect_views(3000, later, table2) else "DIFF")
    assert store == table2
    assert late == expect_views(3000, later, table2)
