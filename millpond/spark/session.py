"""The SparkSession for changelog jobs: local by default, small, with Spark's Kafka connector.

The connector (``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>``) comes through
``spark.jars.packages`` with its Ivy cache under ``$MILLPOND_CACHE/ivy`` (default
``~/.cache/millpond/ivy``), so only the first run downloads it. If the connector's companion
``spark-token-provider-kafka-0-10`` is not published for this exact version in the Maven
repository (some mirrors lack it), the nearest earlier published version is fetched once into
``$MILLPOND_CACHE/spark-jars`` and used instead: it only holds Kafka delegation-token helpers,
whose class signatures match across 4.0.0 and 4.1.0-preview1 (checked with javap). Once a session has started, the resolved jar list is
remembered (``<cache>/spark-jars/*.classpath.json``) and later sessions start from those local
jars without Ivy. ``MILLPOND_SPARK_JARS`` (comma-separated local jar paths) bypasses all
resolution for air-gapped machines.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import quoteattr

from millpond.files import write_atomically
from millpond.spark.errors import SparkUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

GROUP = "org.apache.spark"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
DEFAULT_REPO = "https://repo1.maven.org/maven2"
HTTP_TIMEOUT = 20.0


@dataclass(frozen=True)
class SparkSettings:
    """How to start Spark: master URL, memory, shuffle width and extra ``spark.*`` settings."""

    master: str | None = None  # None: spark-submit's --master, else local[*]
    app_name: str = "millpond-spark"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    conf: Mapping[str, str] = field(default_factory=dict)


def cache_root() -> Path:
    """millpond's download cache (``$MILLPOND_CACHE``, default ``~/.cache/millpond``)."""
    from millpond.dev.kafka import cache_root as root

    return root()


def spark_version() -> str:
    """The installed PySpark's version: the connector must match it exactly."""
    require_pyspark()
    import pyspark

    return str(pyspark.__version__)


def connector_conf(version: str | None = None, cache: Path | None = None) -> dict[str, str]:
    """The ``spark.jars*`` settings that put the Kafka connector on Spark's classpath."""
    jars = os.environ.get("MILLPOND_SPARK_JARS", "").strip()
    if jars:
        return {"spark.jars": jars}
    version = version or spark_version()
    cache = cache or cache_root()
    remembered = remembered_jars(version, cache)
    if remembered:
        return {"spark.jars": ",".join(remembered)}
    conf = {
        "spark.jars.packages": f"{GROUP}:{CONNECTOR}:{version}",
        "spark.jars.ivy": str(cache / "ivy"),
        "spark.jars.ivySettings": str(ivy_settings(cache)),
    }
    substitute = token_provider_substitute(version, cache)
    if substitute is not None:
        conf["spark.jars.excludes"] = f"{GROUP}:{TOKEN_PROVIDER}"
        conf["spark.jars"] = str(substitute)
    return conf


def ivy_settings(cache: Path) -> Path:
    """An Ivy settings file that resolves from the Maven repository only (Maven Central, or
    ``MILLPOND_MAVEN_REPO``), written once under ``<cache>/ivy``.

    Spark's default chain also looks in ``~/.m2/repository``, and Maven often leaves only a
    module's pom there (a dependency it resolved but did not download, e.g. slf4j-api after
    fetching the Kafka or S3Proxy jars): Ivy takes the module from that pom, fails on its
    missing jar, and Spark's JVM never starts."""
    repo = os.environ.get("MILLPOND_MAVEN_REPO", DEFAULT_REPO).rstrip("/") + "/"
    path = cache / "ivy" / "ivysettings.xml"
    text = ('<ivysettings>\n  <settings defaultResolver="maven"/>\n  <resolvers>\n'
            f'    <ibiblio name="maven" m2compatible="true" root={quoteattr(repo)}/>\n'
            '  </resolvers>\n</ivysettings>\n')
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text)
    return path


def connector_jars() -> list[str] | None:
    """The connector's jar files (``MILLPOND_SPARK_JARS``, or as resolved by an earlier
    session), or None if they were never resolved on this machine."""
    jars = os.environ.get("MILLPOND_SPARK_JARS", "").strip()
    if jars:
        return [j for j in jars.split(",") if j]
    return remembered_jars(spark_version(), cache_root())


def _jars_record(version: str, cache: Path) -> Path:
    return cache / "spark-jars" / f"{CONNECTOR}-{version}.classpath.json"


def remembered_jars(version: str, cache: Path) -> list[str] | None:
    """The connector's jars as resolved by an earlier session, if all are still cached.

    Starting from these skips Ivy's resolution (seconds per start, and no network)."""
    try:
        jars = json.loads(_jars_record(version, cache).read_text())["jars"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not jars or not all(Path(j).is_file() for j in jars):
        return None
    return [str(j) for j in jars]


def remember_jars(spark: SparkSession, version: str, cache: Path) -> None:
    """Record the jars Ivy resolved for this session (see :func:`remembered_jars`)."""
    # spark-submit lists every resolved jar (and spark.jars) here as file: URIs.
    listed = str(spark.sparkContext._jsc.sc().conf().get("spark.repl.local.jars", ""))
    paths = []
    for uri in filter(None, listed.split(",")):
        path = Path(uri.removeprefix("file://"))
        if not path.is_file() or path.parent not in (cache / "ivy" / "jars", cache / "spark-jars"):
            return  # not all from our caches: keep resolving with Ivy
        paths.append(str(path))
    if any(CONNECTOR in p for p in paths):
        record = _jars_record(version, cache)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"jars": sorted(paths)}))


def token_provider_substitute(version: str, cache: Path) -> Path | None:
    """A local token-provider jar to use instead of the exact version, or None if not needed.

    The decision is remembered in ``<cache>/spark-jars`` so later runs need no network.
    """
    if _exact_token_provider_cached(version, cache):
        return None
    jars = cache / "spark-jars"
    decision = jars / f"{TOKEN_PROVIDER}-for-{version}.json"
    if decision.is_file():
        chosen = json.loads(decision.read_text()).get("jar")
        if chosen is None or Path(chosen).is_file():
            return Path(chosen) if chosen else None
    repo = os.environ.get("MILLPOND_MAVEN_REPO", DEFAULT_REPO).rstrip("/")
    base = f"{repo}/{GROUP.replace('.', '/')}/{TOKEN_PROVIDER}"
    try:
        if _http_exists(f"{base}/{version}/{TOKEN_PROVIDER}-{version}.pom"):
            _write_decision(decision, None, version)
            return None
        metadata = _http_get(f"{base}/maven-metadata.xml").decode()
        published = re.findall(r"<version>([^<]+)</version>", metadata)
        candidates = [v for v in published if _version_key(v) <= _version_key(version)
                      and v.split(".")[0] == version.split(".")[0]]
        if not candidates:
            raise SparkUnavailableError(
                f"{GROUP}:{TOKEN_PROVIDER}:{version} is not in {repo} and no earlier "
                f"{version.split('.')[0]}.x version is either; set MILLPOND_SPARK_JARS to local "
                f"copies of {CONNECTOR}, {TOKEN_PROVIDER}, kafka-clients and commons-pool2"
            )
        best = max(candidates, key=_version_key)
        name = f"{TOKEN_PROVIDER}-{best}.jar"
        data = _http_get(f"{base}/{best}/{name}")
        expected = _http_get(f"{base}/{best}/{name}.sha1").decode().split()[0].strip()
    except (urllib.error.URLError, OSError, TimeoutError):
        return None  # offline: let Ivy try (and explain) on its own
    if hashlib.sha1(data).hexdigest() != expected:
        raise SparkUnavailableError(f"checksum mismatch downloading {base}/{best}/{name}")
    jars.mkdir(parents=True, exist_ok=True)
    target = jars / name
    write_atomically(target, data)
    _write_decision(decision, target, version)
    return target


def _exact_token_provider_cached(version: str, cache: Path) -> bool:
    ivy_jar = cache / "ivy" / "jars" / f"{GROUP}_{TOKEN_PROVIDER}-{version}.jar"
    m2_jar = (Path.home() / ".m2" / "repository" / GROUP.replace(".", "/") / TOKEN_PROVIDER
              / version / f"{TOKEN_PROVIDER}-{version}.jar")
    return ivy_jar.is_file() or m2_jar.is_file()


def _write_decision(path: Path, jar: Path | None, version: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"for": version, "jar": str(jar) if jar else None}
    write_atomically(path, json.dumps(doc))


def _version_key(version: str) -> tuple[int, ...]:
    """Order Maven versions: 4.1.0-preview1 < 4.1.0 < 4.1.1."""
    main, _, qualifier = version.partition("-")
    numbers = [int(n) for n in re.findall(r"\d+", main)][:3]
    numbers += [0] * (3 - len(numbers))
    if not qualifier:
        return (*numbers, 1, 0)
    digits = re.findall(r"\d+", qualifier)
    return (*numbers, 0, int(digits[0]) if digits else 0)


def _http_exists(url: str) -> bool:
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT):
            return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise


def _http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
        data: bytes = response.read()
        return data


def require_java() -> None:
    """Raise :class:`SparkUnavailableError` unless a ``java`` (17+) can be found."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return
    if shutil.which("java") is None:
        raise SparkUnavailableError(
            "PySpark needs Java 17 or newer, but `java` is not on PATH and JAVA_HOME is not "
            "set. Install a JDK 17+ (e.g. `apt-get install openjdk-17-jdk-headless`)."
        )


QUIET_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
              "spark.sql.session.timeZone": "UTC",
              # Data source options shown in plans and logs: Spark hides those whose name or
              # value matches this or spark.redaction.regex (secret|password|token|...);
              # a PEM client key (kafka.ssl.keystore.key) matches neither by default.
              "spark.sql.redaction.options.regex": r"(?i)url|keystore\.key|jaas"}
# The driver JVM's log4j2 config: warnings and errors, without start-up notices.
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")


def submitted() -> bool:
    """True when spark-submit launched this driver (its JVM and settings are given)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def on_loopback(master: str) -> bool:
    """A local master, or a cluster master on this machine's loopback address: the driver
    then listens on 127.0.0.1 too, so no traffic leaves the machine."""
    return master.startswith("local") or any(
        host in master for host in ("://127.0.0.1:", "://localhost:"))


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """Every ``spark.*`` setting of a millpond session (connector included)."""
    master = settings.master or "local[*]"
    loopback = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    conf = {
        **QUIET_CONF,
        **(loopback if on_loopback(master) else {}),
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
    }
    conf.update(connector_conf())
    conf.update(settings.conf)
    # Before the caller's own options: a -Dlog4j2.configurationFile of theirs comes later
    # on the JVM's command line and wins.
    log4j = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
    if any(c.isspace() for c in log4j):
        log4j = f'"{log4j}"'
    java_opts = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{log4j} {java_opts}".strip()
    return conf


def require_pyspark() -> None:
    """Raise :class:`SparkUnavailableError` naming the extra when PySpark is not installed
    (it is ~300 MB and only the spark commands need it, so it is the ``spark`` extra)."""
    if importlib.util.find_spec("pyspark") is None:
        raise SparkUnavailableError(
            "PySpark is not installed: the spark commands need the spark extra, "
            "pip install 'millpond[spark]'")


def get_spark(settings: SparkSettings | None = None) -> SparkSession:
    """The active SparkSession, or a new one built from ``settings``.

    An already running session is reused as is (Spark cannot add jars to a running JVM):
    it must have been created with :func:`session_conf` settings for Kafka reads to work.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    settings = settings or SparkSettings()
    if submitted():
        # spark-submit started the JVM: its --master, --jars/--packages and memory stand.
        builder = SparkSession.builder.appName(settings.app_name)
        if settings.master:
            builder = builder.master(settings.master)
        conf = {**QUIET_CONF, "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
                **settings.conf}
    else:
        require_java()
        master = settings.master or "local[*]"
        if on_loopback(master):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Workers must run this interpreter (PySpark reads only the environment for this).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = SparkSession.builder.master(master).appName(settings.app_name)
        conf = session_conf(settings)
    for key, value in conf.items():
        builder = builder.config(key, value)
    began = time.monotonic()
    try:
        if not submitted():
            from millpond.spark.console import launch_jvm

            # The JVM's console off stdout and without start-up noise (millpond.spark.console).
            launch_jvm({"spark.master": master, "spark.app.name": settings.app_name, **conf})
        spark = builder.getOrCreate()
    except Exception as exc:
        if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway" in str(exc):
            raise SparkUnavailableError(
                "Spark's JVM did not start (see its output above: usually Java is too old "
                f"or the Kafka connector {GROUP}:{CONNECTOR} could not be resolved from "
                "Maven Central; set MILLPOND_SPARK_JARS to local jars when offline)"
            ) from exc
        raise
    spark.sparkContext.setLogLevel("WARN")
    log.info("Spark %s on %s ready in %.1f s (its log: warnings and errors)", spark.version,
             spark.sparkContext.master, time.monotonic() - began)
    if "spark.jars.packages" in conf and "spark.jars.packages" not in settings.conf:
        try:
            remember_jars(spark, spark_version(), cache_root())
        except Exception:  # only an optimisation of the next start
            pass
    return spark


def stop_spark() -> None:
    """Stop the active session, if any (its JVM stays up for a faster next session)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
