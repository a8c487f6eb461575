"""The streams API's operators, run by the test driver (no Kafka): the same fused code the
tasks run (millpond.streams.runtime)."""

from __future__ import annotations

import pytest

from millpond.streams import (
    App,
    DataflowError,
    OperatorError,
    TestDriver,
    collect,
    count,
    maximum,
    mean,
    minimum,
    total,
)


def test_count_emits_every_new_count_per_key() -> None:
    from tests.streams.apps import counts

    driver = TestDriver(counts)
    for user in ["a", "b", "a", "a"]:
        driver.pipe("page-views", user, {"user_id": user})
    assert driver.read("user-counts") == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]
    assert driver.read("user-counts") == []  # read consumes
    assert driver.state("counts") == {"a": 3, "b": 1}


def test_stateless_operators_keep_the_key() -> None:
    app = App()
    seen: list[tuple[str, int]] = []
    (app.source("in").map(lambda v: v * 10).filter(lambda v: v != 20)
     .flat_map(lambda v: [v, v + 1]).peek(lambda k, v: seen.append((k, v))).to("out"))
    driver = TestDriver(app)
    driver.pipe_all("in", [("x", 1), ("y", 2), ("z", 3)])
    assert driver.read("out") == [("x", 10), ("x", 11), ("z", 30), ("z", 31)]
    assert seen == [("x", 10), ("x", 11), ("z", 30), ("z", 31)]


def test_a_stream_feeds_every_operator_hung_on_it() -> None:
    app = App()
    src = app.source("in")
    src.to("all")
    src.filter(lambda v: v % 2 == 0).to("even")
    driver = TestDriver(app)
    driver.pipe_all("in", [("k", 1), ("k", 2)])
    assert driver.read("all") == [("k", 1), ("k", 2)]
    assert driver.read("even") == [("k", 2)]


def test_aggregations() -> None:
    app = App()
    src = app.source("in")
    src.sum("s", lambda v: v["n"]).to("sum")
    src.min("lo", lambda v: v["n"]).to("min")
    src.max("hi", lambda v: v["n"]).to("max")
    src.mean("avg", lambda v: v["n"]).to("mean")
    src.reduce("r", lambda acc, v: {"n": acc["n"] * v["n"]}).to("product")
    src.fold("f", lambda: "", lambda acc, v: acc + str(v["n"])).to("digits")
    src.aggregate("c", collect(lambda v: v["n"])).to("collected")
    driver = TestDriver(app)
    driver.pipe_all("in", [("k", {"n": 3}), ("k", {"n": 1}), ("k", {"n": 2}), ("j", {"n": 5})])
    assert [v for _, v in driver.read("sum")] == [3, 4, 6, 5]
    assert [v for _, v in driver.read("min")] == [3, 1, 1, 5]
    assert [v for _, v in driver.read("max")] == [3, 3, 3, 5]
    assert [v for _, v in driver.read("mean")] == [3.0, 2.0, 2.0, 5.0]
    assert [v for _, v in driver.read("product")] == [{"n": 3}, {"n": 3}, {"n": 6}, {"n": 5}]
    assert [v for _, v in driver.read("digits")] == ["3", "31", "312", "5"]
    assert driver.read("collected")[-2:] == [("k", [3, 1, 2]), ("j", [5])]
    assert driver.state("avg") == {"k": [6, 3], "j": [5, 1]}  # mean keeps [sum, count]


def test_several_aggregations_share_one_store_and_a_stateful_map_deletes_with_none() -> None:
    from tests.streams.apps import stats

    driver = TestDriver(stats)
    driver.pipe_all("orders", [("u", {"amount": 5, "item": "a"}),
                               ("u", {"amount": 0, "item": "b"}),
                               ("u", {"amount": 7, "item": "c"})])
    assert driver.read("spend") == [("u", {"n": 1, "spent": 5}), ("u", {"n": 2, "spent": 12})]
    assert driver.read("recent") == [("u", ["a"]), ("u", ["a", "b"]), ("u", ["b", "c"])]
    assert driver.state("spend") == {"u": {"n": 2, "spent": 12}}

    app = App()
    app.source("in").stateful_map(
        "session", lambda s, v: (None, "end") if v == "stop" else ((s or 0) + 1, s)).to("out")
    driver = TestDriver(app)
    driver.pipe_all("in", [("k", "go"), ("k", "go"), ("k", "stop")])
    assert driver.read("out") == [("k", None), ("k", 1), ("k", "end")]
    assert driver.state("session") == {}


def test_agg_of_min_max_and_count() -> None:
    app = App()
    app.source("in").agg("stats", n=count(), lo=minimum(), hi=maximum(), avg=mean()).to("out")
    driver = TestDriver(app)
    driver.pipe_all("in", [("k", 4), ("k", 2)])
    assert driver.read("out")[-1] == ("k", {"n": 2, "lo": 2, "hi": 4, "avg": 3.0})


def test_a_failing_function_names_its_operator() -> None:
    app = App()
    app.source("in").map(lambda v: v["missing"]).count("c").to("out")
    with pytest.raises(OperatorError, match=r"operator map #1 \(from in\) raised KeyError"):
        TestDriver(app).pipe("in", "k", {})
    app = App()
    app.source("in").aggregate("sums", total(lambda v: v["n"])).to("out")
    with pytest.raises(OperatorError, match="operator sums raised KeyError"):
        TestDriver(app).pipe("in", "k", {})


def test_state_must_be_what_a_json_store_holds() -> None:
    app = App()
    app.source("in").stateful_map("s", lambda s, v: ({1, 2}, v)).to("out")
    with pytest.raises(Exception, match="(?i)json|serializ"):
        TestDriver(app).pipe("in", "k", 1)


def test_names_of_stateful_operators_are_required_and_unique() -> None:
    app = App()
    src = app.source("in")
    src.count("c")
    with pytest.raises(DataflowError, match="two operators are named 'c'"):
        src.count("c")
    with pytest.raises(DataflowError, match="needs a name"):
        src.count("")
    with pytest.raises(DataflowError, match="reads no topic 'nope'"):
        TestDriver(app).pipe("nope", "k", 1)


def test_key_by_rekeys_the_state_downstream() -> None:
    from tests.streams.apps import pages

    driver = TestDriver(pages)
    driver.pipe_all("page-views", [("alice", {"page": "/a"}), ("bob", {"page": "/a"}),
                                   ("alice", {"page": "/health"}), ("bob", {"page": "/b"})])
    assert driver.read("page-counts") == [("/a", 1), ("/a", 2), ("/b", 1)]
    assert driver.state("page-counts") == {"/a": 2, "/b": 1}
    with pytest.raises(DataflowError, match="two operators are named 'by-page'"):
        pages.source("page-views").key_by("by-page", lambda v: v)


def test_an_app_with_key_by_compiles_its_internal_topic() -> None:
    from millpond.config import Config, parse_properties
    from millpond.streams import describe
    from millpond.streams.compile import internal_topics, with_app

    config = with_app(Config.from_properties(parse_properties(
        "job.name=pv\napp.class=tests.streams.apps:pages\n"
        "systems.kafka.bootstrap.servers=127.0.0.1:1\n"
        "systems.kafka.samza.key.serde=string\nsystems.kafka.samza.msg.serde=json\n", "p")))
    assert internal_topics(config) == ["pv-1-by-page-repartition"]
    assert [r.topic for r in config.job.inputs] == ["page-views", "pv-1-by-page-repartition"]
    assert config.stores["page-counts"].key_serde == "json"  # the re-keyed records' keys
    assert config.get("systems.kafka.streams.pv-1-by-page-repartition.samza.key.serde") == "json"
    from tests.streams.apps import pages

    assert describe.text(pages, config) == (
        "source page-views\n"
        "  -> filter #1 (from page-views)\n"
        "    -> key_by by-page (topic pv-1-by-page-repartition)\n"
        "re-keyed by by-page\n"
        "  -> aggregate page-counts (store page-counts, changelog pv-1-page-counts-changelog)\n"
        "    -> to page-counts\n")
    chart = describe.mermaid(pages, config)
    assert '["key_by by-page (topic pv-1-by-page-repartition)"]' in chart
    assert '(["pv-1-by-page-repartition"])' in chart and chart.count("-->") == 5


def test_branch_sends_each_record_to_the_first_accepting_stream() -> None:
    app = App()
    small, big, rest = app.source("in").branch(lambda v: v < 10, lambda v: v < 100,
                                                default=True)
    small.to("small")
    big.count("bigs").to("big")
    rest.to("rest")
    driver = TestDriver(app)
    driver.pipe_all("in", [("a", 5), ("a", 50), ("b", 500), ("b", 7), ("a", 60)])
    assert driver.read("small") == [("a", 5), ("b", 7)]
    assert driver.read("big") == [("a", 1), ("a", 2)]
    assert driver.read("rest") == [("b", 500)]
    dropped = App()
    (only,) = dropped.source("in").branch(lambda v: v > 0)
    only.to("out")
    driver = TestDriver(dropped)
    driver.pipe_all("in", [("k", -1), ("k", 1)])
    assert driver.read("out") == [("k", 1)]


def test_merge_feeds_one_stateful_operator_from_two_sources() -> None:
    app = App()
    clicks = app.source("clicks").map(lambda v: 1)
    views = app.source("views").map(lambda v: 10)
    clicks.merge(views).sum("score").to("scores")
    driver = TestDriver(app)
    driver.pipe("clicks", "u", {})
    driver.pipe("views", "u", {})
    driver.pipe("clicks", "v", {})
    assert driver.read("scores") == [("u", 1), ("u", 11), ("v", 1)]
    assert driver.state("score") == {"u": 11, "v": 1}
    with pytest.raises(DataflowError, match="same App"):
        clicks.merge(App().source("x"))
