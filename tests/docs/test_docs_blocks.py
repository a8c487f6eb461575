"""Every code block of README.md and docs/ is run or checked, so the docs cannot rot.

The blocks are found by sybil (its Markdown lexers, skip directive and Python evaluator; our
own evaluators for ``sh`` and ``properties`` blocks), one test per page, the blocks of a page
evaluated in order:

* ``python``: executed, the page's blocks sharing one namespace;
* ``properties``: parsed and loaded by millpond's config loader (a fragment on top of a
  minimal job, so its keys are validated as a job would validate them), every key in
  millpond's namespaces known to the config schema or Samza's table, with no ConfigWarning;
* ``sh``: run line by line against the tests' own broker, in a temporary copy of the
  repository's layout (``.venv`` and ``examples`` linked, ``config`` copied), with
  ``127.0.0.1:9092`` (the dev broker) replaced by the test broker's address in the commands
  and the config files. A ``millpond run`` without ``--bounded`` runs until Ctrl-C, as in a
  terminal: it keeps running while the later blocks run ("from another terminal"), until
  ``<!-- docs-test: stop -->`` (or the page's end) sends it SIGINT, and it must exit 0. Each
  command must succeed and have its effect: topics exist, the input grew, the job consumed
  all of it and sent output, ``status`` shows the running process owning every partition.
  A config with ``app.class`` (a dataflow) is compiled as the commands compile it.
* ``text``: output and synopses, not run;
* ``mermaid``: a diagram `millpond app describe --format mermaid` printed; it must still be
  what that command prints (its first line names the command).

A block that cannot run is preceded by ``<!-- skip: next "why" -->`` (sybil's skip
directive, with a reason); a block in any other language, a bare skip, or a skip without a
reason fails :func:`test_every_block_is_runnable_or_says_why_not`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import SkipTest

import pytest
from confluent_kafka import Consumer
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

from millpond.config import Config, ConfigWarning, parse_properties, schema
from millpond.config.samza_keys import samza_key
from millpond.kafka.reading import watermarks
from millpond.metrics.config import parse_reporters
from millpond.stores.engines.rocksdb_options import RocksDbOptions
from millpond.streams.compile import load_config
from tests.kafka_util import REPO, OutputLines, read_stable

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LANGUAGES = {"python", "sh", "properties", "text", "mermaid"}
DEV_BROKER = "127.0.0.1:9092"
VENV = Path(sys.executable).parent.parent  # .venv/bin/python -> .venv
TIMEOUT = 120
SESSION = "__docs_shell_session__"


# ---- properties blocks ----------------------------------------------------------------------

BASE = {"job.name": "docs", "task.class": "examples.page_view_counter.PageViewCounter",
        "task.inputs": "kafka.page-views", "systems.kafka.bootstrap.servers": DEV_BROKER}
STORE_DEFAULTS = {"factory": "rocksdb", "key.serde": "string", "msg.serde": "json"}
NAMESPACES = ("job.", "task.", "stores.", "systems.", "metrics.", "serializers.", "streams.",
              "app.")


def check_properties(example: Example) -> None:
    where = f"{Path(example.path).relative_to(REPO)}:{example.line}"
    block = parse_properties(str(example.parsed), where)
    for key in block:
        if key.startswith(NAMESPACES):  # other keys are the task's own (context.config)
            assert schema.lookup(key) or samza_key(key), f"{where}: unknown key {key}"
    text = "".join(f"{k}={v}\n" for k, v in BASE.items() if k not in block)
    stores = {k.split(".")[1] for k in block if k.startswith("stores.") and k.count(".") >= 2}
    for store in stores - {"default"}:
        text += "".join(f"stores.{store}.{k}={v}\n" for k, v in STORE_DEFAULTS.items()
                        if f"stores.{store}.{k}" not in block)
    props = parse_properties(text + str(example.parsed), where)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        config = Config.from_properties(props)
        parse_reporters(props)
    for store in config.stores.values():
        config.serde_spec(store.key_serde, f"stores.{store.name}.key.serde")
        config.serde_spec(store.msg_serde, f"stores.{store.name}.msg.serde")
        if store.factory == "rocksdb":
            RocksDbOptions.from_store_properties(store.properties)


# ---- sh blocks ------------------------------------------------------------------------------

class Broker:
    """Reads the test broker for the effects the commands must have."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "docs-shell"})

    def partitions(self, topic: str) -> int | None:
        md = self.consumer.list_topics(topic, timeout=30).topics.get(topic)
        return None if md is None or md.error is not None else len(md.partitions)

    def end(self, topic: str) -> int:
        """Sum of the high watermarks of ``topic`` (0 if it does not exist); a partition whose
        leader is still being elected (a topic created a moment ago) is asked again."""
        n = self.partitions(topic) or 0
        return sum(watermarks(self.consumer, topic, p)[1] for p in range(n))

    def records(self, topic: str) -> int:
        return len(read_stable(self.bootstrap, topic)) if self.partitions(topic) else 0

    def resume_total(self, checkpoint_topic: str) -> int:
        """Sum over tasks of the input offsets their last committed checkpoint resumes at."""
        if not self.partitions(checkpoint_topic):
            return 0
        latest: dict[str, int] = {}
        for msg in read_stable(self.bootstrap, checkpoint_topic):
            if msg.value() is not None:
                doc = json.loads(msg.value())
                latest[doc["task"]] = sum(doc["inputs"].values())
        return sum(latest.values())


def _option(args: list[str], name: str, default: str | None = None) -> str | None:
    return args[args.index(name) + 1] if name in args else default


def commands(source: str) -> list[str]:
    """A block's commands: continuation lines joined, comments and blank lines left out."""
    joined = source.replace("\\\n", " ")
    return [c.strip() for c in joined.splitlines() if c.strip() and not c.strip().startswith("#")]


@dataclass
class ShellSession:
    """One page's shell: a copy of the repository's layout, the broker, running jobs."""

    bootstrap: str
    work: Path
    broker: Broker
    running: list[tuple[str, subprocess.Popen[str], OutputLines]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    job: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, bootstrap: str, tmp: Path) -> ShellSession:
        work = tmp / "repo"
        work.mkdir()
        (work / ".venv").symlink_to(VENV)
        (work / "examples").symlink_to(REPO / "examples")
        shutil.copytree(REPO / "config", work / "config")
        for props in (work / "config").glob("*.properties"):
            props.write_text(props.read_text().replace(DEV_BROKER, bootstrap))
        return cls(bootstrap, work, Broker(bootstrap))

    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def run_block(self, example: Example) -> None:
        for written in commands(str(example.parsed)):
            self.run(written, f"{Path(example.path).relative_to(REPO)}:{example.line}: {written}")

    def run(self, written: str, where: str) -> None:
        command = written.replace(DEV_BROKER, self.bootstrap)
        args = shlex.split(command)
        config = _option(args, "--config")
        if config:
            conf = load_config(self.work / config)  # a dataflow's app.class compiled
            self.job = {
                "input": conf.job.inputs[0].topic,
                "output": (conf.get("counts.stream") or "").removeprefix("kafka."),
                "checkpoint": f"__millpond_checkpoint_{conf.job.name}_{conf.job.id}",
                "group": f"{conf.job.name}-{conf.job.id}"}
        if args[0].endswith("millpond") and args[1:2] == ["run"] and "--bounded" not in args:
            self.start_job(args, where)
            return
        input_end = self.broker.end(self.job["input"]) if self.job else 0
        out = subprocess.run(["bash", "-c", command], cwd=self.work, capture_output=True,
                             text=True, timeout=TIMEOUT, env=self.env())
        assert out.returncode == 0, f"{where} failed:\n{out.stdout}\n{out.stderr}"
        self.check_effect(args, out.stdout, input_end, where)

    def start_job(self, args: list[str], where: str) -> None:
        """Start the job as a terminal would, and wait until it consumed its whole input."""
        self.seen.add("run")
        input_end = self.broker.end(self.job["input"])
        outputs_before = self.broker.records(self.job["output"])
        proc = subprocess.Popen(args, cwd=self.work, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.env())
        lines = OutputLines(proc)
        self.running.append((where, proc, lines))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            if (self.broker.resume_total(self.job["checkpoint"]) == input_end
                    and self.broker.records(self.job["output"]) > outputs_before):
                break
            time.sleep(1)
        assert proc.poll() is None, f"{where} exited:\n{lines.text()[-3000:]}"
        assert self.broker.resume_total(self.job["checkpoint"]) == input_end, (
            f"{where}: did not commit all {input_end} input records within {TIMEOUT} s:\n"
            f"{''.join(lines.lines[-30:])}")

    def check_effect(self, args: list[str], stdout: str, input_end: int, where: str) -> None:
        verb = args[1:3] if args[0].endswith("millpond") else []
        if verb == ["topics", "create"]:
            self.seen.add("topics")
            n = int(_option(args, "--partitions") or 0)
            outputs = [args[i + 1] for i, a in enumerate(args) if a == "--output"]
            for topic in [self.job["input"], *(o.removeprefix("kafka.") for o in outputs)]:
                assert self.broker.partitions(topic) == n, f"{where}: {topic} not created"
            assert f" {self.job['input']} " in stdout, stdout
        elif "examples.generate" in args:
            self.seen.add("generate")
            events = int(_option(args, "--events", "20000") or 0)
            assert self.broker.end(self.job["input"]) == input_end + events, where
        elif verb[:1] == ["status"]:
            self.seen.add("status")
            rows = stdout.splitlines()
            assert self.running, f"{where}: expected while the job runs"
            pid = self.running[-1][1].pid
            assert rows[0] == f"group {self.job['group']}: stable, 1 member(s)", rows
            parts = self.broker.partitions(self.job["input"]) or 0
            assert len(rows) == 2 + parts, stdout
            for row in rows[2:]:
                cells = row.split()
                assert cells[1].endswith(f":{pid}"), row  # the running process owns it
                assert cells[5] == "0", row  # lag
        elif verb == ["store", "dump"]:
            self.seen.add("store")
            rows = [json.loads(line) for line in stdout.splitlines()]
            assert rows and all(row["value"] for row in rows), f"{where}: {stdout}"
        elif args[0].endswith("millpond"):
            assert stdout.strip(), f"{where}: printed nothing"

    def stop(self) -> None:
        """Ctrl-C: each job finishes its batch, commits and exits 0."""
        for where, proc, lines in self.running:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{where}: still running 60 s after Ctrl-C") from None
            assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{lines.text()[-3000:]}"
            assert not any(line.startswith("%") for line in lines.text().splitlines()), (
                f"{where}: raw librdkafka log lines in its output")
        self.running.clear()

    def close(self) -> None:
        for _, proc, _ in self.running:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        self.broker.consumer.close()


def run_shell(example: Example) -> None:
    session = example.namespace.get(SESSION)
    assert session is not None, "a runnable sh block on a page the test gave no broker"
    session.run_block(example)


def docs_test_directive(example: Example) -> None:
    action = str(example.parsed).strip()
    assert action == "stop", f"unknown docs-test directive {action!r}"
    session: ShellSession | None = example.namespace.get(SESSION)
    assert session is not None and session.running, "docs-test: stop with no job running"
    session.stop()


class DocsTestParser:
    """``<!-- docs-test: stop -->``: stop the jobs the page started (Ctrl-C)."""

    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer(directive="docs-test", arguments=r"[\w-]+")

    def __call__(self, document: Document) -> Iterator[Region]:
        for lexed in self.lexer(document):
            yield Region(lexed.start, lexed.end, lexed.lexemes["arguments"], docs_test_directive)


def check_mermaid(example: Example) -> None:
    """A ``mermaid`` block opens with ``%% millpond app describe --config F --format mermaid``
    and must be exactly what that command prints (the diagram cannot drift from the app)."""
    from millpond.streams import describe
    from millpond.streams.compile import load_app

    first, _, rest = str(example.parsed).partition("\n")
    m = re.fullmatch(r"%%\s*millpond app describe --config (\S+) --format mermaid", first.strip())
    assert m, f"a mermaid block must open with '%% millpond app describe --config F --format " \
              f"mermaid', not {first!r}"
    config = load_config(REPO / m[1])
    assert rest == describe.mermaid(load_app(config), config), \
        f"the diagram differs from `millpond app describe --config {m[1]} --format mermaid`"


SYBIL = Sybil(parsers=[
    SkipParser(),
    DocsTestParser(),
    PythonCodeBlockParser(),
    CodeBlockParser(language="sh", evaluator=run_shell),
    CodeBlockParser(language="properties", evaluator=check_properties),
    CodeBlockParser(language="mermaid", evaluator=check_mermaid),
])


# ---- which blocks run -----------------------------------------------------------------------

@dataclass
class Block:
    line: int
    language: str
    skip: str | None  # the skip directive's arguments right before it, if any


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` (any language) with the skip directive before it."""
    text = path.read_text()
    fences = FencedCodeBlockLexer(language=r"[^\n]*")(Document(text, str(path)))
    skips = {text.index("-->", region.start) + 3: region.lexemes["arguments"] for region in
             DirectiveInHTMLCommentLexer("skip", ".*?")(Document(text, str(path)))}
    out = []
    for region in fences:
        end = max((e for e in skips if e <= region.start and not text[e:region.start].strip()),
                  default=None)
        out.append(Block(text.count("\n", 0, region.start) + 1, region.lexemes["language"],
                         skips[end] if end is not None else None))
    return out


def needs_broker(path: Path) -> bool:
    return any(b.language == "sh" and b.skip is None for b in blocks(path))


def test_every_block_is_runnable_or_says_why_not() -> None:
    problems = []
    for page in PAGES:
        rel = page.relative_to(REPO)
        for b in blocks(page):
            if b.language not in LANGUAGES:
                problems.append(f"{rel}:{b.line}: a ```{b.language} block: use one of "
                                f"{sorted(LANGUAGES)} (sh for shell)")
            if b.skip is not None and not re.fullmatch(r'next\s+"[^"]{10,}"', b.skip):
                problems.append(f'{rel}:{b.line}: say why the block cannot run: '
                                f'<!-- skip: next "reason" --> (found {b.skip!r})')
        text = page.read_text()
        for m in re.finditer(r"<!--\s*skip:\s*(start|end)", text):
            problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: skip one block "
                            "at a time, with its reason (skip: next \"...\")")
    assert not problems, "\n".join(problems)
    quick = blocks(REPO / "docs" / "getting-started.md")
    assert sum(b.language == "sh" and b.skip is None for b in quick) >= 3, "quick start not run"


@pytest.mark.parametrize("page", [
    pytest.param(p, id=str(p.relative_to(REPO)),
                 marks=[pytest.mark.kafka] if needs_broker(p) else [])
    for p in PAGES if blocks(p)])
def test_page_blocks(page: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    document = SYBIL.parse(page)
    session = None
    if needs_broker(page):
        session = ShellSession.start(request.getfixturevalue("kafka_bootstrap"), tmp_path)
        document.namespace[SESSION] = session
    evaluated = skipped = 0
    try:
        for example in document.examples():
            try:
                example.evaluate()
                evaluated += 1
            except SkipTest:
                skipped += 1
        if session is not None:
            session.stop()  # the page's end: Ctrl-C whatever still runs
            if page.name == "getting-started.md":
                assert {"topics", "generate", "run", "status", "store"} <= session.seen, (
                    f"the quick start lost a step: ran {session.seen}")
    finally:
        if session is not None:
            session.close()
    assert evaluated + skipped >= len(blocks(page)) - _text_blocks(page), page


def _text_blocks(page: Path) -> int:
    return sum(b.language == "text" for b in blocks(page))


def test_readme_and_quick_start_show_the_same_job() -> None:
    """README's StreamTask and properties are the quick start's (both are the shipped files,
    tests/test_readme_example.py checks the README's)."""
    fence = re.compile(r"```(python|properties)\n(.*?)```", re.S)
    readme = fence.findall((REPO / "README.md").read_text())
    quick = fence.findall((REPO / "docs" / "getting-started.md").read_text())
    assert readme[:2] == quick[:2]
