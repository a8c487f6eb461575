"""Fetch a server's jars from Maven Central once, into millpond's cache (Maven does the work).

Used for the dev servers (the Kafka broker, S3Proxy): a small POM naming the server's
artifact is resolved with ``mvn dependency:copy-dependencies`` into a staging directory,
which replaces the cached ``libs`` directory only once complete.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from millpond.dev.errors import ProvisionError, ToolMissingError

COMPLETE_MARKER = ".complete"


def fetch_jars(
    what: str, pom_resource: str, substitutions: Mapping[str, str], home: Path,
    expect: str, echo: Callable[[str], None],
) -> Path:
    """Resolve ``pom_resource`` (a POM template in millpond.dev, ``@NAME@`` placeholders
    replaced from ``substitutions``) into ``home/libs``; return that directory.

    ``expect`` is a glob that must match a fetched jar (the server's own), so a resolution
    that fetched nothing useful fails here with Maven's output, not later at start-up.
    """
    libs = home / "libs"
    if (libs / COMPLETE_MARKER).exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ToolMissingError(
            f"Maven (`mvn`) is required once to fetch the {what} jars from Maven Central, but "
            "it is not on PATH. Install it (e.g. `apt-get install maven`).")
    home.mkdir(parents=True, exist_ok=True)
    template = resources.files("millpond.dev").joinpath(pom_resource).read_text()
    for name, value in substitutions.items():
        template = template.replace(f"@{name}@", value)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=home))
    pom = staging / "pom.xml"
    pom.write_text(template)
    echo(f"Fetching {what} jars from Maven Central into {libs} ...")
    out_dir = staging / "jars"
    cmd = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={out_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not any(out_dir.glob(expect)):
        shutil.rmtree(staging, ignore_errors=True)
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise ProvisionError(f"Maven could not fetch {what}:\n{tail}")
    (out_dir / COMPLETE_MARKER).write_text(" ".join(substitutions.values()) + "\n")
    if libs.exists():
        shutil.rmtree(libs)
    out_dir.rename(libs)
    shutil.rmtree(staging, ignore_errors=True)
    echo(f"{what}: {len(list(libs.glob('*.jar')))} jars cached.")
    return libs
