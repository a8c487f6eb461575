"""The root of every error millpond raises on purpose: ``except MillpondError`` catches them all.

Each package keeps its own specific classes in its ``errors.py`` (``ConfigError``,
``StoreError``, ``ChangelogError``, ...), all derived from :class:`MillpondError`. An
exception that is not a ``MillpondError`` is a bug in millpond or in the user's task: the
CLI prints a ``MillpondError`` as one line (exit code 2) and lets anything else show its
traceback.
"""

from __future__ import annotations


class MillpondError(Exception):
    """Bad config, input, state or environment, said in one line that names what and where."""
