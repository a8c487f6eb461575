"""docker/compose.yml is what the docs say it is (docs/getting-started.md,
docs/operations/metrics.md, docs/operations/cluster.md), checked without a Docker engine:

- its broker is "the same broker" `millpond dev kafka start` runs: the same Kafka version, on
  localhost:9092, and every broker setting the dev broker sets for a single node (replication
  1, no rebalance delay, no topic auto-creation, ...) has the same value;
- Prometheus on localhost:9090 scrapes host port 9404 (the port the demo's `--metrics-port
  9404` and config/hourly-page-views.properties' commented keys serve), keeping the job label;
- Grafana on localhost:3000 provisions the Prometheus data source its dashboard's panels name
  and loads docker/grafana/dashboards/millpond.json as the home dashboard.
(tests/metrics/test_prometheus_scrape.py runs that dashboard's queries against a real
Prometheus scraping a real job.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from millpond.dev.kafka import KAFKA_VERSION, LocalKafka
from tests.kafka_util import REPO

DOCKER = REPO / "docker"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path of a service's read-only bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        host, container, mode = volume.split(":")
        assert mode == "ro", volume
        out[container] = (DOCKER / host).resolve()
    return out


def test_the_compose_broker_is_the_dev_broker(tmp_path: Path) -> None:
    kafka = _yaml(DOCKER / "compose.yml")["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert kafka["ports"] == ["9092:9092"]
    env = {k: str(v) for k, v in kafka["environment"].items()}
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:9092"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    dev = LocalKafka(data_dir=tmp_path, port=9092, controller_port=9093).server_properties()
    # the single-node settings the dev broker makes (not paths, ports or sizes of its own)
    same = ["offsets.topic.replication.factor", "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr", "share.coordinator.state.topic.replication.factor",
            "share.coordinator.state.topic.min.isr", "group.initial.rebalance.delay.ms",
            "log.cleaner.backoff.ms", "auto.create.topics.enable", "process.roles"]
    for key in same:
        assert env.get("KAFKA_" + key.upper().replace(".", "_")) == dev[key], key


def test_prometheus_scrapes_the_port_the_docs_give_a_job() -> None:
    prometheus = _yaml(DOCKER / "compose.yml")["services"]["prometheus"]
    assert prometheus["ports"] == ["9090:9090"]
    assert "host.docker.internal:host-gateway" in prometheus["extra_hosts"]
    config = _mounts(prometheus)["/etc/prometheus/prometheus.yml"]
    assert config == (DOCKER / "prometheus.yml").resolve()
    [scrape] = _yaml(config)["scrape_configs"]
    assert scrape["honor_labels"] is True  # millpond's own `job` label kept
    assert scrape["static_configs"] == [{"targets": ["host.docker.internal:9404"]}]
    # what the docs tell a job to serve for it: the demo's options, the example's keys
    demo = (REPO / "examples" / "demo.py").read_text()
    assert '"--metrics-port"' in demo and '"--metrics-host"' in demo
    props = (REPO / "config" / "hourly-page-views.properties").read_text()
    assert "#metrics.reporters=prometheus\n" in props
    assert "#metrics.reporter.prometheus.port=9404\n" in props
    assert "metrics.reporter.prometheus.host=0.0.0.0" in props


def test_grafana_provisions_prometheus_and_the_millpond_dashboard() -> None:
    grafana = _yaml(DOCKER / "compose.yml")["services"]["grafana"]
    assert grafana["ports"] == ["3000:3000"] and grafana["depends_on"] == ["prometheus"]
    mounts = _mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    [source] = _yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert (source["type"], source["url"]) == ("prometheus", "http://prometheus:9090")
    [provider] = _yaml(provisioning / "dashboards" / "millpond.yml")["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboards = mounts["/var/lib/grafana/dashboards"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith("/var/lib/grafana/dashboards/")
    dashboard = dashboards / home.rsplit("/", 1)[1]
    assert dashboard == (DOCKER / "grafana" / "dashboards" / "millpond.json").resolve()
    text = dashboard.read_text()
    json.loads(text)
    uids = set(re.findall(r'"datasource":\s*\{[^}]*"uid":\s*"([^"]+)"', text))
    assert uids == {source["uid"]}, uids
