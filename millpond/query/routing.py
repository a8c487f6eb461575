"""Which process answers a partition: the endpoint record in the member's client id.

Every process with an endpoint puts its URL in its group consumer's ``client.id``
(``<group>@<host>[query=http://127.0.0.1:9405]:<pid>``), so one ``describe_consumer_groups``
answers both halves of "who owns partition p and where does it listen": the current
assignment and each member's endpoint, from the same snapshot, with nothing to clean up when
a process dies (its record leaves the group with it). librdkafka offers no custom assignor
or member user data from Python; a separate endpoint topic would need its own writes, its
compaction and a join against the assignment that can disagree with it.

A wildcard listen address (``0.0.0.0``, ``::``) is published as ``*`` and replaced by the
member's host as the broker sees it.

The group's description can lag a rebalance: the process it names may no longer hold the
partition. That process answers 503 "not assigned" (it only ever answers from tasks it has
open, on its run loop), and the router describes the group again and tries the new owner
once; so an answer is never a stale one labelled as current, only a 503 to retry.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from millpond.partitioner import partition_of
from millpond.query.reads import Answer

FORWARDED = "Millpond-Forwarded"  # request header: answer here, do not forward again
SERVED_BY = "Millpond-Served-By"  # answer header: the endpoint(s) that answered
FORWARD_TIMEOUT_S = 10.0  # above the owner's own 5 s wait for its run loop
OWNERS_TTL_S = 2.0

_RECORD = re.compile(r"\[query=(?P<url>http://\S+?)\]:\d+$")
_WILDCARDS = {"", "0.0.0.0", "::"}

# (client id, host) of the member each partition of the job's first input is assigned to
Describe = Callable[[], Mapping[int, tuple[str, str]]]


def advertised_url(host: str, port: int) -> str:
    """The URL a process publishes for its endpoint listening on ``host:port``."""
    if host in _WILDCARDS:
        host = "*"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def client_id(group: str, hostname: str, pid: int, url: str | None) -> str:
    """The group consumer's client id: the process, and its endpoint record if it has one
    (the id still ends ``:<pid>``, as ``millpond status`` shows it)."""
    record = f"[query={url}]" if url else ""
    return f"{group}@{hostname}{record}:{pid}"


def endpoint_of(member_client_id: str, member_host: str) -> str | None:
    """The endpoint URL a member's client id publishes (None: it has no endpoint)."""
    found = _RECORD.search(member_client_id)
    if found is None:
        return None
    url = found.group("url")
    if "//*:" in url:
        host = member_host.lstrip("/")
        url = url.replace("*", f"[{host}]" if ":" in host else host, 1)
    return url


class Owners:
    """Partition -> owning endpoint, from the group's description, cached ``ttl_s``."""

    def __init__(self, describe: Describe, ttl_s: float = OWNERS_TTL_S) -> None:
        self._describe = describe
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._owners: dict[int, str] = {}
        self._at = float("-inf")

    def owner(self, partition: int, refresh: bool = False) -> str | None:
        """The endpoint of ``partition``'s owner (None: unassigned or no endpoint);
        ``refresh`` describes the group again whatever the cache's age."""
        with self._lock:
            if refresh or time.monotonic() - self._at > self.ttl_s:
                members = self._describe()
                self._owners = {p: url for p, (cid, host) in members.items()
                                if (url := endpoint_of(cid, host)) is not None}
                self._at = time.monotonic()
            return self._owners.get(partition)


class Router:
    """Finds a key's partition and forwards a request to the partition's owner."""

    def __init__(self, owners: Owners, partitioner: str, self_url: str,
                 timeout_s: float = FORWARD_TIMEOUT_S) -> None:
        self.owners = owners
        self.partitioner = partitioner
        self.self_url = self_url
        self.timeout_s = timeout_s
        self.token: str | None = None  # job.query.token, sent with every forward
        self.partitions: int | None = None  # the task count, once the job has checked topics

    def partition(self, key: bytes) -> int:
        """The partition (task) of the serialized ``key`` (ValueError if none)."""
        if self.partitions is None:
            raise LookupError("the job is starting (its partition count is not known yet)")
        return partition_of(key, self.partitions, self.partitioner)

    def forward(self, url: str, path: str) -> tuple[Answer, str]:
        """``GET url+path`` at another process: its answer and who answered; a failed
        call is a 503 naming the endpoint."""
        import urllib.error  # here: every job imports this module (client_id), few forward
        import urllib.request

        headers = {FORWARDED: "1"}
        if self.token:  # every process of the job has the same token
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                return Answer(resp.status, json.loads(resp.read())), \
                    resp.headers.get(SERVED_BY, url)
        except urllib.error.HTTPError as exc:
            try:
                body: dict[str, Any] = json.loads(exc.read())
            except ValueError:
                body = {"error": f"{url} answered {exc.code}"}
            return Answer(exc.code, body), exc.headers.get(SERVED_BY, url)
        except (OSError, ValueError) as exc:
            return Answer(503, {"error": f"the partition's owner {url} did not answer: "
                                         f"{exc}", "unreachable": True}), url


def not_assigned(answer: Answer) -> bool:
    """Whether ``answer`` says the partition is not assigned to the process that gave it
    (or that process could not be reached): another process may hold it."""
    return answer.status == 503 and (answer.body.get("assigned") is False
                                     or answer.body.get("unreachable") is True)
