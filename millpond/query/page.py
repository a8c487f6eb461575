"""The job's page at ``/`` and the status it shows (``/status``), on the query endpoint.

* ``/`` and ``/static/<file>``: the page (plain HTML, CSS and JavaScript shipped in
  ``millpond/query/static``). It carries no data: its script fetches ``/status`` every 2 s
  and the store browser asks the ``/stores/...`` endpoints, sending
  ``Authorization: Bearer <token>`` when the page's URL ends ``#token=<token>``.
* ``/status/process``: this process alone, live: its tasks (open, opening, closed here
  earlier) with their lag, commit age, counters, restore progress and backups' last
  snapshot, from the same samples the metrics reporters read
  (:class:`millpond.metrics.MetricsSource`).
* ``/status``: the whole job: what ``millpond status`` shows (from Kafka: the group, each
  partition's owner, checkpoint, end offsets, lag and stores; recomputed in the background
  when older than :data:`JOB_STATUS_TTL_S`, however many pages ask), and every process's ``/status/process``,
  asked by this process (each group member's endpoint from its client id,
  :mod:`millpond.query.routing`) side by side, so the page makes one request and needs no
  cross-origin calls.

A process that cannot be reached is listed with its error; Kafka away leaves the job part
with an ``error`` and the processes this one knows (itself).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from millpond.metrics import MetricsSource, TaskSample
from millpond.query.routing import Router, endpoint_of

log = logging.getLogger("millpond.query")

JOB_STATUS_TTL_S = 2.0
FIRST_VIEW_WAIT_S = 1.0  # the page shows the processes' own status meanwhile
PROCESS_PATH = "/status/process"
FAN_OUT_THREADS = 8
# The page's files: path -> (file in millpond/query/static, content type)
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/page.css": ("page.css", "text/css; charset=utf-8"),
    "/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
}

JobStatus = Callable[[], dict[str, Any]]  # `millpond status --format json`'s object


@dataclass(frozen=True)
class Reply:
    """One HTTP answer of the page: status, content type and body bytes."""

    status: int
    content_type: str
    body: bytes

    @classmethod
    def json(cls, status: int, body: dict[str, Any]) -> Reply:
        """A JSON reply."""
        return cls(status, "application/json",
                   json.dumps(body, ensure_ascii=False, default=str).encode())


def is_public(path: str) -> bool:
    """Whether ``path`` is one of the page's own files (no data: served without a token)."""
    return path.split("?", 1)[0] in FILES


def static_file(name: str) -> bytes:
    """A file of the page, from the installed package."""
    return resources.files("millpond.query").joinpath("static", name).read_bytes()


def task_json(sample: TaskSample, now: float) -> dict[str, Any]:
    """One task's live row: counters, lag, commit age, restore progress, backups."""
    stores = []
    for s in sample.stores.values():
        done, left = s.restore_records, s.restore_remaining
        stores.append({
            "store": s.store, "cache_hits": s.cache_hits, "cache_misses": s.cache_misses,
            "changelog_records": s.changelog_records, "restore_records": done,
            "restore_remaining": left, "restore_seconds": round(s.restore_seconds, 3),
            "restore_fraction": (done / (done + left)) if sample.state == "opening"
            and done + left else None,
            "rocksdb": s.rocksdb, "backup": asdict(s.backup) if s.backup is not None else None})
    last = sample.last_commit_time
    return {
        "task": sample.task, "partition": int(sample.task.rsplit("-", 1)[1]),
        "state": sample.state, "processed": sample.processed, "skipped": sample.skipped,
        "commits": sample.commits, "last_commit_time": last,
        "commit_age_s": round(max(0.0, now - last), 3) if last is not None else None,
        "lag": dict(sample.lag), "lag_total": sum(sample.lag.values()),
        "delivery_errors": sample.delivery_errors, "stores": stores}


class StatusPage:
    """Serves the page and the status of one job process (see the module's docstring)."""

    def __init__(self, job: str, url: str, metrics: MetricsSource | None,
                 job_status: JobStatus | None, router: Router | None,
                 ttl_s: float = JOB_STATUS_TTL_S) -> None:
        self.job = job
        self.url = url
        self.metrics = metrics
        self.job_status = job_status
        self.router = router
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None  # (monotonic time, view)
        self._refreshing: threading.Thread | None = None  # one `millpond status` at a time

    def serve(self, path: str) -> Reply | None:
        """The reply to a GET of ``path``, or None when it is not the page's."""
        bare = path.split("?", 1)[0]
        try:
            if bare in FILES:
                name, content_type = FILES[bare]
                return Reply(200, content_type, static_file(name))
            if bare == PROCESS_PATH:
                return Reply.json(200, self.process())
            if bare in ("/status", "/status/"):
                return Reply.json(200, self.job_view())
        except Exception as exc:  # noqa: BLE001 - answered, the endpoint carries on
            log.warning("%s failed: %s", path, exc, exc_info=True)
            return Reply.json(500, {"error": f"{type(exc).__name__}: {exc}"})
        return None

    def process(self) -> dict[str, Any]:
        """This process's live status."""
        now = time.time()
        samples = self.metrics.sample() if self.metrics is not None else []
        return {"url": self.url, "job": self.job, "host": socket.gethostname(),
                "pid": os.getpid(), "time": now,
                "tasks": [task_json(s, now) for s in samples]}

    def kafka_view(self) -> tuple[dict[str, Any], float | None]:
        """``millpond status``'s object and its age in seconds (None: none yet).

        A view older than :attr:`ttl_s` is recomputed in the background (it takes seconds:
        a consumer, the checkpoint topic, every partition's watermarks) while the requests
        meanwhile answer the last one; only the first request waits for it, at most
        :data:`FIRST_VIEW_WAIT_S`."""
        if self.job_status is None:
            return {"error": "this endpoint has no Kafka view"}, None
        with self._lock:
            cached = self._cached
            if (cached is None or time.monotonic() - cached[0] >= self.ttl_s) and (
                    self._refreshing is None):
                self._refreshing = threading.Thread(target=self._refresh, daemon=True,
                                                    name="millpond-status-kafka")
                self._refreshing.start()
            pending = self._refreshing
        if cached is None and pending is not None:
            pending.join(FIRST_VIEW_WAIT_S)
            with self._lock:
                cached = self._cached
        if cached is None:
            return {"error": "still asking Kafka (millpond status takes seconds)"}, None
        return cached[1], round(time.monotonic() - cached[0], 3)

    def _refresh(self) -> None:
        assert self.job_status is not None
        try:
            view = self.job_status()
            for row in view.get("partitions", []):  # each owner's endpoint, for the page
                owner = row.get("owner")
                row["owner_url"] = endpoint_of(owner["client_id"], owner["host"]) \
                    if owner else None
        except Exception as exc:  # noqa: BLE001 - Kafka away or denied: say so
            log.info("the job's status from Kafka: %s", exc)
            view = {"error": f"{type(exc).__name__}: {exc}"}
        with self._lock:
            self._cached = (time.monotonic(), view)
            self._refreshing = None

    def job_view(self) -> dict[str, Any]:
        """The whole job: the Kafka view and every process's own status."""
        kafka, age = self.kafka_view()
        urls = [self.url]
        for row in kafka.get("partitions", []):
            url = row.get("owner_url")
            if url is not None and url not in urls:
                urls.append(url)
        with ThreadPoolExecutor(min(len(urls), FAN_OUT_THREADS),
                                thread_name_prefix="millpond-status") as pool:
            processes = list(pool.map(self._ask, urls))
        return {"job": self.job, "served_by": self.url, "time": time.time(),
                "kafka": kafka, "kafka_age_s": age, "processes": processes}

    def _ask(self, url: str) -> dict[str, Any]:
        """``url``'s ``/status/process`` (this process's own without a request)."""
        if url == self.url:
            return self.process()
        if self.router is None:
            return {"url": url, "error": "this endpoint does not route"}
        answer, _ = self.router.forward(url, PROCESS_PATH)
        if answer.status != 200:
            error = str(answer.body.get("error", f"answered {answer.status}"))
            return {"url": url, "error": "not answering: " + error.split("did not answer: ")[-1]}
        return answer.body
