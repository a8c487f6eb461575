"""Pure-Python parts of millpond.spark: no JVM, no broker."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from millpond.config import SerdeSpec
from millpond.spark.audit import AuditReport, PartitionAudit
from millpond.spark.decode import DecodeError, make_decoder, serde_kind, to_json
from millpond.spark.session import (
    _version_key,
    connector_conf,
    ivy_settings,
    remembered_jars,
    token_provider_substitute,
)
from millpond.spark.snapshot import (
    CURRENT,
    MARKER,
    BatchWriter,
    _is_spark_55271,
    complete_versions,
    current_version,
    last_commit,
    version_dir,
)
from millpond.spark.source import offsets_json


def test_maven_versions_order_previews_before_releases() -> None:
    versions = ["4.1.1", "4.0.0", "4.1.0-preview1", "4.1.0", "3.5.4", "4.0.0-preview2"]
    assert sorted(versions, key=_version_key) == [
        "3.5.4", "4.0.0-preview2", "4.0.0", "4.1.0-preview1", "4.1.0", "4.1.1"]


def test_connector_conf_prefers_explicit_then_remembered_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MILLPOND_SPARK_JARS", "/a.jar,/b.jar")
    assert connector_conf("4.1.1", tmp_path) == {"spark.jars": "/a.jar,/b.jar"}
    monkeypatch.delenv("MILLPOND_SPARK_JARS")
    jar = tmp_path / "ivy" / "jars" / "x.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"")
    record = tmp_path / "spark-jars" / "spark-sql-kafka-0-10_2.13-4.1.1.classpath.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"jars": [str(jar)]}))
    assert remembered_jars("4.1.1", tmp_path) == [str(jar)]
    assert connector_conf("4.1.1", tmp_path) == {"spark.jars": str(jar)}
    jar.unlink()  # a cache cleaned since: resolve again
    assert remembered_jars("4.1.1", tmp_path) is None


def test_ivy_resolves_from_the_maven_repository_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not from ~/.m2, where Maven leaves pom-only modules Ivy cannot take a jar from."""
    import xml.etree.ElementTree as ET

    monkeypatch.delenv("MILLPOND_SPARK_JARS", raising=False)
    monkeypatch.setenv("MILLPOND_MAVEN_REPO", "https://mirror.example/maven2?a=1&b=2")
    monkeypatch.setattr("millpond.spark.session.token_provider_substitute", lambda v, c: None)
    conf = connector_conf("4.1.1", tmp_path)
    path = Path(conf["spark.jars.ivySettings"])
    assert path == ivy_settings(tmp_path) and path.parent == tmp_path / "ivy"
    resolvers = ET.parse(path).getroot().find("resolvers")
    assert resolvers is not None
    assert [(r.tag, r.get("root"), r.get("m2compatible")) for r in resolvers] == [
        ("ibiblio", "https://mirror.example/maven2?a=1&b=2/", "true")]
    assert ET.parse(path).getroot().find("settings").get("defaultResolver") == "maven"


def test_token_provider_decision_is_remembered_without_network(tmp_path: Path) -> None:
    jar = tmp_path / "spark-jars" / "spark-token-provider-kafka-0-10_2.13-4.1.0.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"jar")
    decision = jar.parent / "spark-token-provider-kafka-0-10_2.13-for-4.1.1.json"
    decision.write_text(json.dumps({"for": "4.1.1", "jar": str(jar)}))
    assert token_provider_substitute("4.1.1", tmp_path) == jar
    decision.write_text(json.dumps({"for": "4.1.1", "jar": None}))
    assert token_provider_substitute("4.1.1", tmp_path) is None


def test_offsets_json_is_sparks_per_partition_format() -> None:
    assert json.loads(offsets_json("t", {1: -2, 0: 23})) == {"t": {"0": 23, "1": -2}}


def test_serde_kinds_follow_factories_and_samza_aliases() -> None:
    def spec(factory: str) -> SerdeSpec:
        return SerdeSpec("x", factory)

    assert serde_kind(spec("string")) == "string"
    assert serde_kind(spec("org.apache.samza.serializers.LongSerdeFactory")) == "long"
    assert serde_kind(spec("org.apache.samza.serializers.JsonSerdeFactory")) == "json"
    assert serde_kind(spec("avro")) == "json"
    assert serde_kind(spec("my.pkg.Serde")) == "json"


def test_python_decoder_names_store_partition_offset_on_bad_data() -> None:
    decoder = make_decoder(SerdeSpec("j", "json"), "json", "value", "s")
    assert decoder(0, 5, b'{"a": [1, 2]}') == '{"a":[1,2]}'
    assert decoder(0, 5, None) is None
    with pytest.raises(DecodeError, match="store 's' partition 3 offset 9: cannot decode value"):
        decoder(3, 9, b"{nope")


def test_to_json_handles_what_avro_and_custom_serdes_return() -> None:
    obj = {"b": b"\x00\x01", "d": datetime.date(2024, 1, 2), "t": (1, 2)}
    assert json.loads(to_json(obj)) == {"b": "AAE=", "d": "2024-01-02", "t": [1, 2]}


def test_audit_report_is_ok_only_without_divergence() -> None:
    report = AuditReport("s", "t", "end", "state", 1.0,
                         {0: PartitionAudit(end=5, matching=3), 1: PartitionAudit(end=2)})
    assert report.ok and report.to_dict()["totals"]["matching"] == 3
    report.partitions[1].extra = 1
    assert not report.ok and report.to_dict()["ok"] is False


def make_version(out: Path, batch_id: int, complete: bool = True, as_of: int = 0) -> Path:
    path = version_dir(out, batch_id)
    path.mkdir(parents=True)
    if complete:
        (path / MARKER).write_text(json.dumps({"as_of": {"0": as_of}, "keys": batch_id}))
    return path


def test_snapshot_versions_base_pointer_and_garbage(tmp_path: Path) -> None:
    out = tmp_path
    for batch_id in (0, 1, 2, 4):
        make_version(out, batch_id, as_of=batch_id * 10)
    make_version(out, 3, complete=False)  # killed while writing
    make_version(out, 9)  # left by a run with another checkpoint
    writer = BatchWriter(out, serdes=None, keep_versions=2)  # type: ignore[arg-type]

    assert [v.batch_id for v in complete_versions(out)] == [0, 1, 2, 4, 9]
    assert writer._base(4) is not None and writer._base(4).batch_id == 2  # type: ignore[union-attr]
    assert writer._base(0) is None

    (out / CURRENT).write_text(json.dumps({"batch_id": 4}))
    writer._unpoint(4, writer._base(4))  # re-running batch 4: CURRENT must not name it
    assert json.loads((out / CURRENT).read_text()) == {"batch_id": 2}
    assert current_version(out).as_of == {0: 20}  # type: ignore[union-attr]

    writer._collect_garbage(4)
    assert sorted(p.name for p in (out / "versions").iterdir()) == ["000000000002", "000000000004"]


def test_current_version_refuses_an_incomplete_version(tmp_path: Path) -> None:
    assert current_version(tmp_path) is None
    make_version(tmp_path, 5, complete=False)
    (tmp_path / CURRENT).write_text(json.dumps({"batch_id": 5}))
    with pytest.raises(Exception, match="incomplete"):
        current_version(tmp_path)


def test_last_commit_and_the_spark_bug_it_works_around(tmp_path: Path) -> None:
    assert last_commit(tmp_path) is None
    (tmp_path / "commits").mkdir()
    for name in ("0", "1", ".1.crc", "12"):
        (tmp_path / "commits" / name).write_text("")
    assert last_commit(tmp_path) == 12
    npe = Exception('Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because '
                    'the return value of "scala.Option.get()" is null')
    assert _is_spark_55271(npe)
    assert not _is_spark_55271(Exception("Kafka broker down"))
