"""Running `python -m benchmarks.run` from a test: into a temp dir, against the test broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.kafka_util import REPO


def run_bench(bootstrap: str, tmp_path: Path, *args: str,
              timeout: float = 600) -> tuple[dict[str, Any], Path]:
    """``benchmarks.run`` with ``args``, its reports in ``tmp_path/out`` (never over
    benchmarks/results.*): the results, once it exited 0 with no problem within ``timeout``
    seconds; and that dir."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks.run", *args, "--bootstrap", bootstrap,
           "--out-dir", str(out), "--work-dir", str(tmp_path / "work")]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["problems"] == [], results["problems"]
    return results, out
