"""millpond: Samza-style stateful stream processing for Python."""

__version__ = "0.1.0"
