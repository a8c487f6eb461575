"""Deterministic input data for the four example jobs, produced to a Kafka broker.

    python -m examples.generate page-views     # 1. windowed aggregation (hourly-page-views)
    python -m examples.generate user-tables    # 2. table-table join (profile-settings-join)
    python -m examples.generate zip-views      # 3. stream-table join (page-view-zip-enricher)
    python -m examples.generate ad-events      # 4. stream-stream join (ad-click-join)

Every subcommand takes ``--seed`` (same seed, same data), creates the input and output topics
with the partition count the job needs (``--partitions``, equal for all inputs of a job), and
produces each record to an explicit partition (``partition_for``: CRC-32 of the key), in order,
with an idempotent producer, so every partition holds its records in generation order. The
functions that build the records are importable: tests and the demo feed the same records to a
plain-Python reference (``examples.reference``).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

BOOTSTRAP = "127.0.0.1:9092"
HOUR_MS = 3_600_000
MINUTE_MS = 60_000
START = "2024-05-01T08:00:00Z"
ZIP_CODES = ("94103", "94110", "10001", "10027", "60614", "73301", "98109", "02139",
             "30301", "80202", "33101", "19104")
PAGES = ("/", "/search", "/cart", "/checkout", "/help", "/account") + tuple(
    f"/item/{n}" for n in range(20))
THEMES = ("light", "dark", "solarized")
LANGUAGES = ("en", "de", "fr", "es", "ja")


@dataclass(frozen=True)
class Record:
    """One input message: its partition, key, JSON value (None: a tombstone) and event time."""

    partition: int
    key: str
    value: dict[str, Any] | None
    timestamp: int


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key``: CRC-32 of its UTF-8 bytes modulo ``partitions`` (stable)."""
    return zlib.crc32(key.encode()) % partitions


def parse_time(text: str) -> int:
    """``2024-05-01T08:00:00Z`` -> epoch milliseconds."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()
               * 1000)


def _users(count: int) -> list[str]:
    return [f"user-{n:03d}" for n in range(count)]


def _skewed(rng: random.Random, items: Sequence[str], k: int) -> list[str]:
    """``k`` draws from ``items`` with a Zipf-like skew (a few very active users)."""
    return rng.choices(items, weights=[1 / (n + 1) ** 0.8 for n in range(len(items))], k=k)


# ---- 1. page views (windowed aggregation; also the stream side of the zip enrichment) --------

def page_views(seed: int = 1, events: int = 20_000, users: int = 50, hours: int = 6,
               start_ms: int | None = None, jitter_ms: int = 2 * MINUTE_MS,
               late_fraction: float = 0.002, partitions: int = 4, first_view: int = 0,
               user_ids: Sequence[str] | None = None) -> list[Record]:
    """Page views over ``hours`` hours, keyed by user_id.

    Event time (the ``timestamp`` field, epoch ms) advances steadily with up to
    ``jitter_ms`` of disorder either way; a ``late_fraction`` of views arrive 1-2 hours late.
    ``view_id`` runs from ``first_view`` so batches generated separately don't collide.
    """
    rng = random.Random(seed)
    start = parse_time(START) if start_ms is None else start_ms
    pool = list(user_ids) if user_ids is not None else _users(users)
    chosen = _skewed(rng, pool, events)
    span = hours * HOUR_MS
    out = []
    for i, user in enumerate(chosen):
        ts = start + i * span // events + rng.randint(-jitter_ms, jitter_ms)
        if rng.random() < late_fraction:
            ts -= rng.randint(HOUR_MS, 2 * HOUR_MS)
        ts = max(ts, 0)
        view = {"view_id": f"v{first_view + i:08d}", "user_id": user,
                "page": rng.choice(PAGES), "timestamp": ts}
        out.append(Record(partition_for(user, partitions), user, view, ts))
    return out


# ---- 2. user profile and user settings change streams (table-table join) --------------------

def profile(rng: random.Random, user: str, version: int, ts: int) -> dict[str, Any]:
    return {"user_id": user, "name": f"{user.replace('user-', 'User ')}", "version": version,
            "zip": rng.choice(ZIP_CODES), "plan": rng.choice(("free", "pro", "team")),
            "updated_at": ts}


def user_tables(seed: int = 2, users: int = 60, changes: int = 4_000,
                delete_fraction: float = 0.03, partitions: int = 4,
                start_ms: int | None = None) -> tuple[list[Record], list[Record]]:
    """(profile changes, settings changes), both keyed by user_id; None values delete a row."""
    rng = random.Random(seed)
    start = parse_time(START) if start_ms is None else start_ms
    pool = _users(users)
    versions: dict[tuple[str, str], int] = {}
    profiles: list[Record] = []
    settings: list[Record] = []
    for i, user in enumerate(_skewed(rng, pool, changes)):
        ts = start + i * 1000
        table = "profile" if rng.random() < 0.5 else "settings"
        version = versions[(table, user)] = versions.get((table, user), 0) + 1
        value: dict[str, Any] | None
        if rng.random() < delete_fraction:
            value = None
        elif table == "profile":
            value = profile(rng, user, version, ts)
        else:
            value = {"user_id": user, "version": version, "theme": rng.choice(THEMES),
                     "language": rng.choice(LANGUAGES), "emails": rng.random() < 0.4,
                     "updated_at": ts}
        record = Record(partition_for(user, partitions), user, value, ts)
        (profiles if table == "profile" else settings).append(record)
    return profiles, settings


# ---- 3. profiles + page views (stream-table join) ---------------------------------------------

def zip_views(seed: int = 3, users: int = 40, views: int = 6_000, without_profile: int = 4,
              partitions: int = 4, start_ms: int | None = None
              ) -> tuple[list[Record], list[Record]]:
    """(one profile per user except the last ``without_profile`` users, page views of all)."""
    rng = random.Random(seed)
    start = parse_time(START) if start_ms is None else start_ms
    pool = _users(users)
    profiles = [Record(partition_for(u, partitions), u, profile(rng, u, 1, start), start)
                for u in pool[:users - without_profile]]
    rng.shuffle(profiles)
    views_out = page_views(seed + 1, views, hours=2, start_ms=start, partitions=partitions,
                           late_fraction=0.0, user_ids=pool)
    return profiles, views_out


def profile_updates(seed: int, user_ids: Iterable[str], partitions: int = 4, version: int = 2,
                    ts: int | None = None) -> list[Record]:
    """A new profile (new ZIP code, ``version``) for each of ``user_ids``."""
    rng = random.Random(seed)
    at = parse_time(START) + 3 * HOUR_MS if ts is None else ts
    return [Record(partition_for(u, partitions), u, profile(rng, u, version, at), at)
            for u in user_ids]


# ---- 4. ad impressions and clicks (stream-stream join) -----------------------------------------

def ad_events(seed: int = 4, impressions: int = 5_000, click_rate: float = 0.35,
              orphan_clicks: int = 50, minutes: int = 120, max_delay_ms: int = 15 * MINUTE_MS,
              partitions: int = 4, start_ms: int | None = None
              ) -> tuple[list[Record], list[Record]]:
    """(impressions, clicks), keyed by impression_id, each stream in event-time order.

    A ``click_rate`` share of impressions is clicked 1 s to ``max_delay_ms`` later (so some
    clicks fall outside a 10-minute join window); ``orphan_clicks`` clicks name an impression
    that was never shown. Both streams end at ``start + minutes``: clicks after that are cut.
    """
    rng = random.Random(seed)
    start = parse_time(START) if start_ms is None else start_ms
    span = minutes * MINUTE_MS
    imps: list[Record] = []
    clicks: list[tuple[int, str, dict[str, Any]]] = []
    users = _users(200)
    for i in range(impressions):
        imp_id = f"imp-{seed}-{i:07d}"
        ts = start + i * span // impressions
        imp = {"impression_id": imp_id, "ad_id": f"ad-{rng.randrange(30):02d}",
               "user_id": rng.choice(users), "placement": rng.choice(("top", "side", "feed")),
               "timestamp": ts}
        imps.append(Record(partition_for(imp_id, partitions), imp_id, imp, ts))
        cts = ts + rng.randint(1000, max_delay_ms)
        if rng.random() < click_rate and cts < start + span:  # both logs end at start + span
            clicks.append((cts, imp_id, {"impression_id": imp_id, "click_id": f"clk-{i:07d}",
                                         "timestamp": cts}))
    for n in range(orphan_clicks):
        imp_id = f"imp-{seed}-orphan-{n:04d}"
        cts = start + rng.randrange(span)
        clicks.append((cts, imp_id, {"impression_id": imp_id, "click_id": f"clk-orphan-{n:04d}",
                                     "timestamp": cts}))
    clicks.sort(key=lambda c: (c[0], c[1]))
    return imps, [Record(partition_for(k, partitions), k, v, ts) for ts, k, v in clicks]


# ---- producing ---------------------------------------------------------------------------------

def create_topics(bootstrap: str, topics: dict[str, int], compacted: Iterable[str] = ()) -> None:
    """Create each topic with its partition count; an existing topic must have that count."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from millpond.kafka import clients

    admin = clients.admin({"bootstrap.servers": bootstrap})
    compact = set(compacted)
    futures = admin.create_topics([
        NewTopic(t, n, 1, config={"cleanup.policy": "compact"} if t in compact else {})
        for t, n in topics.items()])
    for topic, future in futures.items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            have = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
            if have != topics[topic]:
                raise click.ClickException(
                    f"topic {topic} exists with {have} partitions, the job needs "
                    f"{topics[topic]}: delete it or pick another name") from None


def produce(bootstrap: str, topic: str, records: Iterable[Record]) -> int:
    """Produce ``records`` to ``topic`` in order (idempotent: no reordering, no duplicates).

    Raises if any record was not delivered."""
    from millpond.kafka import clients

    producer = clients.producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    n = 0
    for r in records:
        value = None if r.value is None else json.dumps(r.value, separators=(",", ":"))
        while True:
            try:
                # The Kafka timestamp stays the produce time: event time is the "timestamp"
                # field. Fixed 2024 event times as Kafka timestamps would be older than the
                # broker's retention (7 days), and the broker would delete the input.
                producer.produce(topic, key=r.key.encode(), value=value, partition=r.partition,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    if left or failures:
        raise RuntimeError(f"producing to {topic}: {left} records still queued after 60 s, "
                           f"{len(failures)} failed (first: {failures[:1]})")
    return n


# ---- command line ------------------------------------------------------------------------------

def _common(fn: Any) -> Any:
    fn = click.option("--bootstrap", default=BOOTSTRAP, show_default=True,
                      help="bootstrap.servers of the broker.")(fn)
    fn = click.option("--partitions", type=int, default=4, show_default=True,
                      help="Partitions of every topic (= the job's task count).")(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Deterministic input data for the example jobs (same --seed, same data)."""


@main.command("page-views")
@_common
@click.option("--topic", default="page-views", show_default=True)
@click.option("--output-topic", default="hourly-page-views", show_default=True)
@click.option("--events", type=int, default=20_000, show_default=True)
@click.option("--users", type=int, default=50, show_default=True)
@click.option("--hours", type=int, default=6, show_default=True)
@click.option("--late-fraction", type=float, default=0.002, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def page_views_cmd(bootstrap: str, partitions: int, topic: str, output_topic: str, events: int,
                   users: int, hours: int, late_fraction: float, seed: int) -> None:
    """Page views for the hourly windowed aggregation (examples.hourly_page_views)."""
    create_topics(bootstrap, {topic: partitions, output_topic: partitions})
    n = produce(bootstrap, topic, page_views(seed, events, users, hours,
                                             late_fraction=late_fraction, partitions=partitions))
    click.echo(f"{topic}: {n} page views of {users} users over {hours} h")


@main.command("user-tables")
@_common
@click.option("--profiles-topic", default="user-profiles", show_default=True)
@click.option("--settings-topic", default="user-settings", show_default=True)
@click.option("--output-topic", default="user-profile-settings", show_default=True)
@click.option("--users", type=int, default=60, show_default=True)
@click.option("--changes", type=int, default=4_000, show_default=True)
@click.option("--seed", type=int, default=2, show_default=True)
def user_tables_cmd(bootstrap: str, partitions: int, profiles_topic: str, settings_topic: str,
                    output_topic: str, users: int, changes: int, seed: int) -> None:
    """Profile and settings change streams for the table-table join."""
    create_topics(bootstrap, {profiles_topic: partitions, settings_topic: partitions,
                              output_topic: partitions}, compacted=[output_topic])
    profiles, settings = user_tables(seed, users, changes, partitions=partitions)
    produce(bootstrap, profiles_topic, profiles)
    produce(bootstrap, settings_topic, settings)
    click.echo(f"{profiles_topic}: {len(profiles)} changes, {settings_topic}: {len(settings)}")


@main.command("zip-views")
@_common
@click.option("--profiles-topic", default="user-profiles", show_default=True)
@click.option("--views-topic", default="page-views", show_default=True)
@click.option("--output-topic", default="page-views-by-zip", show_default=True)
@click.option("--users", type=int, default=40, show_default=True)
@click.option("--views", type=int, default=6_000, show_default=True)
@click.option("--seed", type=int, default=3, show_default=True)
def zip_views_cmd(bootstrap: str, partitions: int, profiles_topic: str, views_topic: str,
                  output_topic: str, users: int, views: int, seed: int) -> None:
    """User profiles (with ZIP codes) and page views for the stream-table join."""
    create_topics(bootstrap, {profiles_topic: partitions, views_topic: partitions,
                              output_topic: partitions})
    profiles, page = zip_views(seed, users, views, partitions=partitions)
    produce(bootstrap, profiles_topic, profiles)
    produce(bootstrap, views_topic, page)
    click.echo(f"{profiles_topic}: {len(profiles)} profiles, {views_topic}: {len(page)} views")


@main.command("ad-events")
@_common
@click.option("--impressions-topic", default="ad-impressions", show_default=True)
@click.option("--clicks-topic", default="ad-clicks", show_default=True)
@click.option("--output-topic", default="ad-click-joins", show_default=True)
@click.option("--impressions", type=int, default=5_000, show_default=True)
@click.option("--click-rate", type=float, default=0.35, show_default=True)
@click.option("--seed", type=int, default=4, show_default=True)
def ad_events_cmd(bootstrap: str, partitions: int, impressions_topic: str, clicks_topic: str,
                  output_topic: str, impressions: int, click_rate: float, seed: int) -> None:
    """Ad impressions and clicks for the stream-stream join."""
    create_topics(bootstrap, {impressions_topic: partitions, clicks_topic: partitions,
                              output_topic: partitions})
    imps, clicks = ad_events(seed, impressions, click_rate, partitions=partitions)
    produce(bootstrap, impressions_topic, imps)
    produce(bootstrap, clicks_topic, clicks)
    click.echo(f"{impressions_topic}: {len(imps)} impressions, {clicks_topic}: {len(clicks)}")


if __name__ == "__main__":
    main()
