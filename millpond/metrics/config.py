"""The ``metrics.*`` keys, with Samza's names: which reporters run and where they listen.

    metrics.reporters=prometheus
    metrics.reporter.prometheus.port=9404      # required; 0 picks a free port (logged)
    metrics.reporter.prometheus.host=127.0.0.1 # default

Every problem is a :class:`MetricsConfigError` naming the key, file and line.
"""

from __future__ import annotations

import difflib
import logging
import warnings
from dataclasses import dataclass
from typing import cast

from millpond.config import ConfigWarning, Properties
from millpond.config.values import describe, error, get_int, where
from millpond.metrics.errors import MetricsConfigError

REPORTERS_KEY = "metrics.reporters"
REPORTER_PREFIX = "metrics.reporter."
KNOWN_REPORTERS = ("prometheus",)
PROMETHEUS_KEYS = ("port", "host")
DEFAULT_HOST = "127.0.0.1"

log = logging.getLogger("millpond.config")


@dataclass(frozen=True)
class PrometheusConfig:
    """Where the Prometheus reporter serves ``/metrics``."""

    port: int
    host: str = DEFAULT_HOST


def _error(props: Properties, key: str, message: str) -> MetricsConfigError:
    return cast(MetricsConfigError, error(props, key, message, MetricsConfigError))


def parse_reporters(props: Properties) -> list[PrometheusConfig]:
    """The reporters ``metrics.reporters`` lists (empty when it is unset or empty)."""
    listed = [n.strip() for n in props.get(REPORTERS_KEY, "").split(",") if n.strip()]
    names = []
    for name in listed:
        java = props.get(f"{REPORTER_PREFIX}{name}.class", "").strip()
        if java and name not in KNOWN_REPORTERS:
            # a Samza config's own reporter (a Java class): the config ports, it is not run
            log.info("ignoring metrics reporter %s (%s): %s is a Java class; millpond's "
                     "reporter is prometheus", name, describe(props, REPORTERS_KEY), java)
            continue
        if name not in KNOWN_REPORTERS:
            raise _error(props, REPORTERS_KEY,
                         f"unknown metrics reporter {name!r}; known reporters: "
                         f"{', '.join(KNOWN_REPORTERS)} (a Samza reporter needs its "
                         f"{REPORTER_PREFIX}{name}.class to be ignored)")
        names.append(name)
    _check_reporter_keys(props, names, [n for n in listed if n not in names])
    return [_prometheus(props) for name in dict.fromkeys(names) if name == "prometheus"]


def _check_reporter_keys(props: Properties, names: list[str], java: list[str]) -> None:
    """Unknown keys of a listed reporter are errors; keys of an unlisted one warn (those of
    an ignored Java reporter are ignored with it)."""
    for key in props:
        if not key.startswith(REPORTER_PREFIX):
            continue
        name, _, sub = key[len(REPORTER_PREFIX):].partition(".")
        if name in java or sub == "class":
            continue
        if name not in names:
            warnings.warn(f"{describe(props, key)}: {key} is set but {REPORTERS_KEY} does not "
                          f"list {name!r}, so it has no effect", ConfigWarning, stacklevel=3)
            continue
        if sub not in PROMETHEUS_KEYS:
            close = difflib.get_close_matches(sub, PROMETHEUS_KEYS, n=1)
            hint = f"; did you mean {REPORTER_PREFIX}{name}.{close[0]}?" if close else ""
            raise _error(props, key, f"unknown key of the {name} metrics reporter (known: "
                         f"{', '.join(PROMETHEUS_KEYS)}){hint}")


def _prometheus(props: Properties) -> PrometheusConfig:
    port_key = f"{REPORTER_PREFIX}prometheus.port"
    host_key = f"{REPORTER_PREFIX}prometheus.host"
    raw = props.get(port_key)
    if raw is None or not raw.strip():
        file, line = where(props, REPORTERS_KEY)
        raise MetricsConfigError(
            f"is required when {REPORTERS_KEY} lists prometheus (0 picks a free port)",
            key=port_key, file=file, line=line)
    port = get_int(props, port_key, 0, minimum=0, maximum=65535, kind=MetricsConfigError)
    host = props.get(host_key, DEFAULT_HOST).strip()
    if not host:
        raise _error(props, host_key, "must not be empty (default 127.0.0.1)")
    return PrometheusConfig(port, host)
