"""The README's shell blocks, run as written against the test broker, so the front door cannot rot.

Which blocks run is said in README.md itself: every ``sh`` block of the quick start and the
CLI section (from "## A StreamTask and its properties" to "## Guarantees") follows a marker,
``<!-- readme-test: run -->`` or ``<!-- readme-test: skip: <reason> -->``; a block without one
fails :func:`test_every_quick_start_shell_block_says_whether_it_runs`. ``make demo`` and
``make test`` ("## Two commands") are not run here: tests/examples/test_demo.py runs the demo,
and ``make test`` is this suite.

The runnable blocks run line by line from a copy of the repository's layout (``.venv`` and
``examples`` linked, ``config`` copied) in a temporary directory, so the job's ``state/`` is
the test's own. The only change is the broker address: ``127.0.0.1:9092`` (the dev broker) in
the commands and the config files becomes the test broker's. A ``millpond run`` without
``--bounded`` runs until Ctrl-C, as in a terminal: it keeps running while the later blocks run
("from another terminal"), then gets SIGINT and must exit 0. Each command must succeed, and
its effect must be there: the topics exist, the input grew, the job consumed all of it and
sent counts, ``status`` shows the running process owning every partition with no lag.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.kafka_util import REPO, OutputLines, read_stable

README = (REPO / "README.md").read_text()
DEV_BROKER = "127.0.0.1:9092"
VENV = Path(sys.executable).parent.parent  # .venv/bin/python -> .venv
SECTION = ("## A StreamTask and its properties", "## Guarantees")
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<marker>[^\n]*?) -->\n)?```sh\n(?P<body>.*?)```",
                   re.S)
TIMEOUT = 120


@dataclass
class Block:
    line: int  # 1-based line of the fence in README.md
    run: bool
    reason: str
    commands: list[str] = field(default_factory=list)


def quick_start_blocks() -> list[Block]:
    """The ``sh`` blocks of the quick start and CLI sections, with their markers."""
    start, end = README.index(SECTION[0]), README.index(SECTION[1])
    blocks = []
    for m in BLOCK.finditer(README, start, end):
        marker = m.group("marker") or ""
        line = README.count("\n", 0, m.start("body"))
        joined = m.group("body").replace("\\\n", " ")
        commands = [c.strip() for c in joined.splitlines()
                    if c.strip() and not c.strip().startswith("#")]
        reason = marker.removeprefix("skip:").strip() if marker.startswith("skip:") else ""
        blocks.append(Block(line, marker == "run", reason, commands))
        assert marker == "run" or (marker.startswith("skip:") and reason), (
            f"README.md line {line}: a shell block needs `<!-- readme-test: run -->` or "
            f"`<!-- readme-test: skip: <reason> -->` before it (found {marker!r})")
    return blocks


def test_every_quick_start_shell_block_says_whether_it_runs() -> None:
    blocks = quick_start_blocks()
    runnable = [b for b in blocks if b.run]
    assert runnable, "no runnable shell block in the quick start"
    assert any("millpond run" in c for b in runnable for c in b.commands), "the quick start runs no job"


class Broker:
    """Reads the test broker for the effects the commands must have."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readme-shell"})

    def partitions(self, topic: str) -> int | None:
        md = self.consumer.list_topics(topic, timeout=30).topics.get(topic)
        return None if md is None or md.error is not None else len(md.partitions)

    def end(self, topic: str) -> int:
        """Sum of the high watermarks of ``topic`` (0 if it does not exist)."""
        n = self.partitions(topic) or 0
        return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in range(n))

    def records(self, topic: str) -> int:
        return len(read_stable(self.bootstrap, topic)) if self.partitions(topic) else 0

    def resume_total(self, checkpoint_topic: str) -> int:
        """Sum over tasks of the input offsets their last committed checkpoint resumes at."""
        if not self.partitions(checkpoint_topic):
            return 0
        import json

        latest: dict[str, int] = {}
        for msg in read_stable(self.bootstrap, checkpoint_topic):
            if msg.value() is not None:
                doc = json.loads(msg.value())
                latest[doc["task"]] = sum(doc["inputs"].values())
        return sum(latest.values())


def _option(args: list[str], name: str, default: str | None = None) -> str | None:
    return args[args.index(name) + 1] if name in args else default


@pytest.mark.kafka
def test_readme_shell_blocks_run_as_written(kafka_bootstrap: str, tmp_path: Path) -> None:
    from millpond.config import Config

    work = tmp_path / "repo"
    work.mkdir()
    (work / ".venv").symlink_to(VENV)
    (work / "examples").symlink_to(REPO / "examples")
    shutil.copytree(REPO / "config", work / "config")
    for props in (work / "config").glob("*.properties"):
        props.write_text(props.read_text().replace(DEV_BROKER, kafka_bootstrap))

    broker = Broker(kafka_bootstrap)
    running: list[tuple[str, subprocess.Popen[str], OutputLines]] = []
    seen: set[str] = set()
    job_topics: dict[str, str] = {}
    try:
        for block in quick_start_blocks():
            if not block.run:
                continue
            for written in block.commands:
                command = written.replace(DEV_BROKER, kafka_bootstrap)
                args = shlex.split(command)
                where = f"README.md block at line {block.line}: {written}"
                config = _option(args, "--config")
                if config:
                    conf = Config.load(work / config, ())
                    job_topics = {
                        "input": conf.job.inputs[0].topic,
                        "output": (conf.get("counts.stream") or "").removeprefix("kafka."),
                        "checkpoint": f"__millpond_checkpoint_{conf.job.name}_{conf.job.id}",
                        "group": f"{conf.job.name}-{conf.job.id}"}
                if "millpond" in command and args[1:2] == ["run"] and "--bounded" not in args:
                    seen.add("run")
                    input_end = broker.end(job_topics["input"])
                    outputs_before = broker.records(job_topics["output"])
                    proc = subprocess.Popen(args, cwd=work, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)
                    lines = OutputLines(proc)
                    running.append((where, proc, lines))
                    # The job consumes every input record and sends counts.
                    deadline = time.monotonic() + TIMEOUT
                    while time.monotonic() < deadline and proc.poll() is None:
                        if (broker.resume_total(job_topics["checkpoint"]) == input_end
                                and broker.records(job_topics["output"]) > outputs_before):
                            break
                        time.sleep(1)
                    assert proc.poll() is None, f"{where} exited:\n{lines.text()[-3000:]}"
                    assert broker.resume_total(job_topics["checkpoint"]) == input_end, (
                        f"{where}: did not commit all {input_end} input records within "
                        f"{TIMEOUT} s:\n{''.join(lines.lines[-30:])}")
                    continue
                input_end = broker.end(job_topics["input"]) if job_topics else 0
                out = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True,
                                     text=True, timeout=TIMEOUT)
                assert out.returncode == 0, f"{where} failed:\n{out.stdout}\n{out.stderr}"
                if args[1:3] == ["topics", "create"]:
                    seen.add("topics")
                    n = int(_option(args, "--partitions") or 0)
                    outputs = [args[i + 1] for i, a in enumerate(args) if a == "--output"]
                    for topic in [job_topics["input"], *(o.removeprefix("kafka.") for o in outputs)]:
                        assert broker.partitions(topic) == n, f"{where}: {topic} not created"
                    assert f" {job_topics['input']} " in out.stdout, out.stdout
                elif "examples.generate" in command:
                    seen.add("generate")
                    events = int(_option(args, "--events", "20000") or 0)
                    assert broker.end(job_topics["input"]) == input_end + events, where
                elif args[1:2] == ["status"]:
                    seen.add("status")
                    rows = out.stdout.splitlines()
                    assert running, f"{where}: expected while the job runs"
                    pid = running[-1][1].pid
                    assert rows[0] == f"group {job_topics['group']}: stable, 1 member(s)", rows
                    parts = broker.partitions(job_topics["input"])
                    assert len(rows) == 2 + (parts or 0), out.stdout
                    for row in rows[2:]:
                        cells = row.split()
                        assert cells[1].endswith(f":{pid}"), row  # the running process owns it
                        assert cells[5] == "0", row  # lag
        assert {"topics", "run", "status"} <= seen, f"the quick start lost a step: ran {seen}"
        # Ctrl-C: the job finishes its batch, commits and exits 0.
        for where, proc, lines in running:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{where}: still running 60 s after Ctrl-C") from None
            assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{lines.text()[-3000:]}"
            assert not any(line.startswith("%") for line in lines.text().splitlines()), (
                f"{where}: raw librdkafka log lines in its output")
    finally:
        for _, proc, _ in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        broker.consumer.close()
