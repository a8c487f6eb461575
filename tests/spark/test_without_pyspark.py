"""Without the spark extra, a spark command fails with one line that names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Run the CLI with pyspark unimportable, as on an install without the extra.
HIDE_PYSPARK = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
import importlib.util
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] == "pyspark" else _find_spec(name, package))
from millpond.cli import main
sys.exit(main())
"""


def test_spark_command_names_the_extra(tmp_path: Path) -> None:
    config = tmp_path / "job.properties"
    config.write_text("job.name=j\ntask.inputs=kafka.in\n"
                      "systems.kafka.bootstrap.servers=127.0.0.1:1\n"
                      "stores.s.factory=rocksdb\nstores.s.changelog=kafka.j-s-changelog\n"
                      "stores.s.key.serde=string\nstores.s.msg.serde=string\n"
                      "serializers.registry.string.class=string\n")
    done = subprocess.run(
        [sys.executable, "-c", HIDE_PYSPARK, "spark", "rebuild", "--config", str(config),
         "--store", "s"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors == ["Error: PySpark is not installed: the spark commands need the spark "
                      "extra, pip install 'millpond[spark]'"], done.stderr
    # the other commands do not need it
    ok = subprocess.run([sys.executable, "-c", HIDE_PYSPARK, "--help"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and "spark" in ok.stdout
