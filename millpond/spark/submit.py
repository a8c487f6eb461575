"""The spark-submit entry point: the ``millpond spark`` commands under spark-submit.

``spark-submit [spark options] "$(millpond spark submit-script)" rebuild --config ...`` runs
the same command as ``millpond spark rebuild --config ...``, with the master, jars, memory
and Python environment that spark-submit (and the cluster manager) provide.
"""

from __future__ import annotations

import sys

from millpond.spark.cli import spark


def main(argv: list[str] | None = None) -> None:
    """Run one ``millpond spark`` command with ``argv`` (default: the script's arguments)."""
    spark.main(args=sys.argv[1:] if argv is None else argv, prog_name="millpond spark")


if __name__ == "__main__":
    main()
