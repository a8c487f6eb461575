"""`millpond app describe`: the app's operators, stores, changelogs and topics."""

from __future__ import annotations

from millpond.config import Config, parse_properties
from millpond.streams import describe
from millpond.streams.compile import with_app
from tests.kafka_util import millpond

PROPS = ("job.name=shop\napp.class=tests.streams.apps:stats\n"
         "systems.kafka.bootstrap.servers=127.0.0.1:1\n"
         "systems.kafka.samza.key.serde=string\nsystems.kafka.samza.msg.serde=json\n")


def test_text_and_mermaid_name_every_operator_store_and_topic() -> None:
    from tests.streams.apps import stats

    config = with_app(Config.from_properties(parse_properties(PROPS, "app.properties")))
    assert config.job.task_class == "millpond.streams.runtime.DataflowTask"
    assert [ref.topic for ref in config.job.inputs] == ["orders"]
    assert describe.text(stats, config) == (
        "source orders\n"
        "  -> filter #1 (from orders)\n"
        "    -> aggregate spend (store spend, changelog shop-1-spend-changelog)\n"
        "      -> to spend\n"
        "  -> stateful_map last-two (store last-two, changelog shop-1-last-two-changelog)\n"
        "    -> to recent\n")
    chart = describe.mermaid(stats, config)
    assert chart.startswith("flowchart LR\n")
    for part in ('(["orders"])', '(["spend"])', '(["recent"])', '[("aggregate spend',
                 '[("stateful_map last-two', '["filter #1 (from orders)"]'):
        assert part in chart, chart
    assert chart.count("-->") == 5


def test_the_command_refuses_a_streamtask_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "task.properties"
    conf.write_text("job.name=j\ntask.class=tests.jobs.counting.Counter\ntask.inputs=kafka.in\n"
                    "systems.kafka.bootstrap.servers=127.0.0.1:1\n")
    out = millpond("app", "describe", "--config", str(conf))
    assert out.returncode == 2 and "StreamTask job" in out.stderr, out.stderr
    app = tmp_path / "app.properties"
    app.write_text(PROPS)
    out = millpond("app", "describe", "--config", str(app))
    assert out.returncode == 0, out.stderr
    assert "aggregate spend (store spend, changelog shop-1-spend-changelog)" in out.stdout
