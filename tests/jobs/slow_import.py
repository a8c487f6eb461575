"""A task module that is slow to import (as one importing a large library is), so a test
can signal `millpond run` while it is still starting up.

Importing it prints ``importing slowly`` to stderr and sleeps ``MILLPOND_TEST_IMPORT_DELAY``
seconds (default 0).
"""

from __future__ import annotations

import os
import sys
import time

from tests.jobs.counting import Counter

_delay = float(os.environ.get("MILLPOND_TEST_IMPORT_DELAY", "0"))
if _delay:
    print(f"importing slowly ({_delay:.0f} s)", file=sys.stderr, flush=True)
    time.sleep(_delay)


class SlowImportCounter(Counter):
    """The plain counter, from a module that takes a while to import."""
