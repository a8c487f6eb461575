"""What every peer script shares: its command line and the versions it reports.

    python <peer>_count.py MODE SPEC.json

Each peer script runs as a script of its own virtualenv's interpreter (this directory is
then first on ``sys.path``, so ``import peer_main`` finds this file); MODE picks one of its
functions, which takes the spec (a JSON file the harness wrote) and returns its report, and
the report, with the versions of the peer's distributions that interpreter runs, is written
as JSON to the spec's ``out``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def versions(dists: Iterable[str]) -> dict[str, str | None]:
    """The versions this interpreter (the peer's own virtualenv) runs with."""
    import importlib.metadata as metadata

    out: dict[str, str | None] = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main(modes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]],
         dists: Iterable[str]) -> None:
    mode, spec_path = sys.argv[1], sys.argv[2]
    spec = json.loads(Path(spec_path).read_text())
    out = modes[mode](spec)
    out["versions"] = versions(dists)
    Path(spec["out"]).write_text(json.dumps(out))
