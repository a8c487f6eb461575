"""Compiling an app's stateful operators into stores (no Kafka): the defaults, and what the
properties may set over them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.config import Config, ConfigError
from millpond.streams.compile import load_config

BASE = ("job.name=pv\napp.class=tests.streams.apps:views_by_page_and_user\n"
        "views.topic=views\nsystems.kafka.bootstrap.servers=127.0.0.1:1\n"
        "systems.kafka.samza.key.serde=string\nsystems.kafka.samza.msg.serde=json\n")


@pytest.fixture
def compiled(tmp_path: Path) -> Callable[..., Config]:
    """``compiled(extra, *overrides)``: the config `millpond` commands work from."""
    def load(extra: str = "", *overrides: str) -> Config:
        path = tmp_path / "app.properties"
        path.write_text(BASE + extra)
        return load_config(path, overrides)

    return load


def test_each_operator_gets_a_logged_rocksdb_store_keyed_like_its_records(
    compiled: Callable[..., Config],
) -> None:
    stores = compiled().stores
    assert set(stores) == {"page-counts", "user-stats"}
    for name, key_serde in (("page-counts", "json"), ("user-stats", "string")):
        store = stores[name]
        assert (store.factory, store.key_serde, store.msg_serde) == (
            "rocksdb", key_serde, "json")
        assert store.changelog is not None and store.changelog.topic == f"pv-1-{name}-changelog"
        assert store.backup_enabled


def test_the_compiled_app_class_is_not_reported_as_ignored(
    compiled: Callable[..., Config],
) -> None:
    """`millpond run` logged "ignoring app.class ...: when task.class is set" for every app:
    the task.class is the one compiled from it."""
    config = compiled()
    assert config.get("task.class") == "millpond.streams.runtime.DataflowTask"
    assert "app.class" not in config.ignored


def test_a_key_that_tunes_an_operator_store_keeps_its_other_defaults(
    compiled: Callable[..., Config],
) -> None:
    """`stores.<name>.backup.enabled=false` (or an object cache size, a changelog topic) is
    how a user tunes any store, in the file or with --config-override (as the backup tests
    turn a store's backups off): the operator's store keeps its other compiled keys."""
    stores = compiled("stores.user-stats.object.cache.size=0\n"
                      "stores.user-stats.changelog=kafka.my-stats\n",
                      "stores.page-counts.backup.enabled=false").stores
    counts, stats = stores["page-counts"], stores["user-stats"]
    assert not counts.backup_enabled
    assert (counts.factory, counts.key_serde, counts.msg_serde) == ("rocksdb", "json", "json")
    assert counts.changelog is not None and counts.changelog.topic == "pv-1-page-counts-changelog"
    assert stats.object_cache_size == 0 and stats.backup_enabled
    assert stats.changelog is not None and stats.changelog.topic == "my-stats"
    assert (stats.key_serde, stats.msg_serde) == ("string", "json")


def test_a_partial_store_no_operator_has_is_still_refused(
    compiled: Callable[..., Config],
) -> None:
    with pytest.raises(ConfigError, match=r"override: stores.page-count.factory: is missing"):
        compiled("", "stores.page-count.backup.enabled=false")  # a typo of page-counts


def test_sliding_window_interval_join_and_versioned_table_stores_have_string_keys(
    tmp_path: Path,
) -> None:
    """Their store keys are strings ordered by time (`<end>|<start>|<key>`,
    `<key>|<side>|<time>|<seq>`, `<key>|<time>`), whatever the input's key serde."""
    path = tmp_path / "app.properties"
    path.write_text(BASE.replace("views_by_page_and_user", "timed_joins")
                    .replace("samza.key.serde=string", "samza.key.serde=json"))
    stores = load_config(path).stores
    assert set(stores) == {"trades-per-second", "quoted", "rate-versions"}
    assert {name: store.key_serde for name, store in stores.items()} == dict.fromkeys(
        stores, "string")


def test_a_window_store_writes_down_at_the_object_cache_size_unless_configured(
    tmp_path: Path,
) -> None:
    """A window store's dirty entries (each window put, then deleted when it closes) wait up
    to the object cache's default size, not the general 50,000, so windows that open and
    close between two commits reach neither RocksDB nor the changelog; the key still wins."""
    path = tmp_path / "app.properties"
    path.write_text(BASE.replace("views_by_page_and_user", "timed_joins"))
    stores = load_config(path).stores
    assert stores["trades-per-second"].write_batch_size == 100_000  # the window
    assert stores["quoted"].write_batch_size == 50_000  # an interval join: the general default
    stores = load_config(path, ["stores.trades-per-second.write.batch.size=10"]).stores
    assert stores["trades-per-second"].write_batch_size == 10
