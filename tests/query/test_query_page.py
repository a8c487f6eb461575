"""The job's page in a real browser (Debian's chromium, driven by Playwright) against a job
running on the real broker: its tasks, their lag and counters, and a value looked up and
scanned in the store browser, each compared with what the job really holds.

The page's screenshots (the job running, then restoring) go to ``tmp_path``, or to
``MILLPOND_PAGE_SCREENSHOT`` and ``query-page-restoring.png`` beside it when set: how
``docs/operations/img/query-page*.png`` are made. Under CI=true a missing chromium or
Playwright fails the test (``make browser`` installs both)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millpond.partitioner import partition_of
from tests.conftest import installed, unavailable
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    stop_job,
    write_properties,
)
from tests.query.processes import PARTITIONS, fetch, produce, start

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOKEN = "page-test-token"
WAIT_MS = 60_000


def playwright() -> Any:
    """Playwright's sync API, else fail in CI or skip."""
    try:
        from playwright import sync_api
    except ImportError:
        unavailable("playwright is not installed (pip install playwright; `make browser`)")
        raise
    return sync_api


def per_partition(expected: Counter[str]) -> dict[int, int]:
    """Records each task processes: the page views of the users its partition holds."""
    out = dict.fromkeys(range(PARTITIONS), 0)
    for user, n in expected.items():
        out[partition_of(user.encode(), PARTITIONS)] += n
    return out


@pytest.mark.timeout(180)
def test_the_page_shows_tasks_lag_and_store_values(kafka_bootstrap: str, tmp_path: Path) -> None:
    browser_path = installed("chromium", "Debian: apt-get install chromium; `make browser`")
    api = playwright()
    name = f"query-page-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, name, partitions=PARTITIONS)
    props = counting_job(kafka_bootstrap, name, name, tmp_path / "state",
                         **{"job.query.address": "127.0.0.1:0"})
    config = write_properties(tmp_path / "job.properties", props)
    # 1,500 users: ~375 keys per changelog partition, a restore the page sees under way
    expected = produce(kafka_bootstrap, name, 3000, 1500)
    proc, out, base = start(config, None)
    shot = Path(os.environ.get("MILLPOND_PAGE_SCREENSHOT") or tmp_path / "query-page.png")
    user = "user-7"
    try:
        with api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser_path)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []  # the page's uncaught script errors
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            sent: list[str | None] = []
            page.on("request", lambda r: sent.append(r.headers.get("authorization"))
                    if r.url.endswith("/status") else None)
            page.goto(f"{base}/#token={TOKEN}")
            expect = api.expect
            expect(page.locator("#job")).to_have_text(name, timeout=WAIT_MS)
            want = per_partition(expected)
            for p in range(PARTITIONS):  # every task open here, all its input processed
                row = page.locator(f'#tasks tr[data-task="partition-{p}"]')
                expect(row.locator("td.state")).to_have_text("open", timeout=WAIT_MS)
                expect(row.locator("td.process")).to_have_text(base)
                expect(row.locator("td.processed")).to_have_text(str(want[p]), timeout=WAIT_MS)
                expect(row.locator("td.lag")).to_have_text("0", timeout=WAIT_MS)
                expect(row.locator("td.committed-lag")).to_have_text("0", timeout=WAIT_MS)
                expect(row.locator("td.commit-age")).to_have_text(
                    re.compile(r"\d+\.\d s"), timeout=WAIT_MS)
            expect(page.locator(f'#processes tr[data-url="{base}"] td').nth(2)).to_have_text(
                str(proc.pid))
            assert sent and all(h == f"Bearer {TOKEN}" for h in sent), sent

            page.fill("#key", user)  # the store browser: one key, wherever it is held
            page.click("#lookup button")
            expect(page.locator("#entries td.value")).to_have_text(str(expected[user]),
                                                                   timeout=WAIT_MS)
            expect(page.locator("#browse-status")).to_contain_text(
                f"found in partition {partition_of(user.encode(), PARTITIONS)}")
            shown = int(page.locator("#entries td.value").inner_text())
            status, body, _ = fetch(f"{base}/stores/counts/get?key={user}")
            assert (status, body["value"]) == (200, shown), body
            page.screenshot(path=str(shot), full_page=True)

            page.fill("#prefix", "user-14")  # a prefix scan, page by page with "More"
            page.click("#scan button[type=submit]")
            prefixed = sorted(u for u in expected if u.startswith("user-14"))
            rows = page.locator("#entries tbody tr")
            expect(rows).to_have_count(min(50, len(prefixed)), timeout=WAIT_MS)
            while page.locator("#more").is_visible():
                before = rows.count()
                page.click("#more")
                expect(rows).to_have_count(min(before + 50, len(prefixed)), timeout=WAIT_MS)
            keys = [k.strip('"') for k in page.locator("#entries td.key").all_inner_texts()]
            values = [int(v) for v in page.locator("#entries td.value").all_inner_texts()]
            assert keys == prefixed and values == [expected[u] for u in prefixed]

            # Restart with the local state gone: each task restores its store, slowly, and
            # the page shows the restoring task with its progress bar.
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, out.text()[-3000:]
            shutil.rmtree(tmp_path / "state")
            write_properties(config, {**props, "task.restore.listener.class":
                                      "tests.jobs.counting.SlowRestoreListener"})
            proc, out, base = start(config, None, env={"MILLPOND_TEST_RESTORE_DELAY": "2.5"})
            page.goto(f"{base}/#token={TOKEN}")
            restoring = page.locator("#tasks tr:has(td.restore .bar)")
            expect(restoring.locator("td.state")).to_have_text("opening", timeout=WAIT_MS)
            expect(restoring.locator("td.restore")).to_have_text(
                re.compile(r"^counts [1-9]\d*/[1-9]\d*$"), timeout=WAIT_MS)
            page.screenshot(path=str(shot.with_name("query-page-restoring.png")), full_page=True)
            for p in range(PARTITIONS):
                expect(page.locator(f'#tasks tr[data-task="partition-{p}"] td.state')
                       ).to_have_text("open", timeout=WAIT_MS)
            assert errors == [], errors
            browser.close()
    finally:
        if proc.poll() is None:
            stop_job(proc, 60)
    assert proc.returncode == 0, out.text()[-3000:]
    assert dump_store(config, "counts")[user] == shown  # the store's value, committed at stop
    assert shot.stat().st_size > 10_000 and time.time() - shot.stat().st_mtime < 600

