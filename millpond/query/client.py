"""Asking a running job's query endpoint from outside it (``millpond query``).

Any process of the job answers any key (:mod:`millpond.query.routing`), so the client needs
one endpoint: the one it is given, else those the job's group members publish in their
client ids (the job's consumer group, described once), else the config's own
``job.query.address``. It tries them in that order until one answers; an answer that is not
200 is an error naming the endpoint and the reason the endpoint gave.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

from millpond.errors import MillpondError
from millpond.query.errors import QueryError
from millpond.query.routing import advertised_url, endpoint_of

TIMEOUT_S = 30.0  # above the endpoint's own forwards (10 s) and run loop wait (5 s)


class QueryUnavailable(MillpondError):
    """No endpoint of the job answered, or the one that did has no answer now (503: the job
    starting, stopping, restoring, rebalancing): a runtime failure, exit 1; retry."""


def group_endpoints(describe: Callable[[], Any]) -> list[str]:
    """The endpoint URLs the members of a consumer group publish (``describe``: its
    description, or None), in the members' order."""
    desc = describe()
    out: list[str] = []
    for member in desc.members if desc is not None else ():
        url = endpoint_of(member.client_id, member.host)
        if url is not None and url not in out:
            out.append(url)
    return out


def own_endpoint(address: tuple[str, int] | None) -> str | None:
    """The URL of a config's ``job.query.address`` (a wildcard host: this machine), None if
    it is unset or picks a free port (port 0)."""
    if address is None or address[1] == 0:
        return None
    return advertised_url(*address).replace("//*:", "//127.0.0.1:")


class QueryClient:
    """GETs of a job's endpoints, JSON back; ``token``: the job's ``job.query.token``."""

    def __init__(self, endpoints: list[str], token: str | None = None,
                 timeout_s: float = TIMEOUT_S) -> None:
        if not endpoints:
            raise QueryUnavailable("no process of the job publishes a query endpoint (is the "
                                   "job running with job.query.address?); give one with "
                                   "--endpoint")
        self.endpoints = [url.rstrip("/") for url in endpoints]
        self.token = token
        self.timeout_s = timeout_s

    def get(self, path: str) -> dict[str, Any]:
        """The JSON answer to ``GET path`` from the first endpoint that answers."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        failures = []
        for url in self.endpoints:
            request = urllib.request.Request(url + path, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    body: dict[str, Any] = json.loads(resp.read())
                    return body
            except urllib.error.HTTPError as exc:
                raise _refused(url, exc) from exc
            except (OSError, ValueError) as exc:  # not listening, unreachable, not JSON
                failures.append(f"{url}: {getattr(exc, 'reason', exc)}")
        raise QueryUnavailable(f"no query endpoint of the job answered ({'; '.join(failures)})")

    def path(self, store: str, op: str, partition: int | None,
             params: list[tuple[str, str]]) -> str:
        """The path of ``op`` on ``store`` (at ``partition``, else wherever its keys are)."""
        where = "" if partition is None else f"/{partition}"
        return f"/stores/{quote(store, safe='')}{where}/{op}?{urlencode(params)}"

    def pages(self, store: str, op: str, partition: int | None,
              params: list[tuple[str, str]], every: bool,
              after: str | None = None) -> Iterator[dict[str, Any]]:
        """The first page of a scan (from continuation token ``after``, if given) and, with
        ``every``, each following one (its continuation tokens followed to the end)."""
        while True:
            page = self.get(self.path(store, op, partition,
                                      params + ([("next", after)] if after else [])))
            yield page
            after = page.get("next")
            if not every or after is None:
                return


def _refused(url: str, exc: urllib.error.HTTPError) -> MillpondError:
    """The error an endpoint's non-200 answer is: a request to fix (400, 401, 404: exit 2)
    or no answer now (503) or a failed read (500): exit 1."""
    try:
        message = json.loads(exc.read()).get("error", "")
    except (ValueError, AttributeError):
        message = ""
    text = f"{url} answered {exc.code}: {message or exc.reason}"
    if exc.code in (400, 401, 403, 404):
        return QueryError(text)
    return QueryUnavailable(text)
