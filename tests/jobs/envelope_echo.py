"""Echoes what the task sees of each input message, as JSON, to ``echo.stream``."""

from __future__ import annotations

from millpond import OutgoingMessageEnvelope, StreamTask


class EnvelopeEcho(StreamTask):
    """One output per input: the envelope's stream, partition, offset, key, message,
    timestamp and headers (values as text), and its system-stream-partition."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.output = context.config.get("echo.stream")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        ssp = envelope.system_stream_partition
        collector.send(OutgoingMessageEnvelope(self.output, key=envelope.key, message={
            "stream": envelope.stream, "partition": envelope.partition,
            "offset": envelope.offset, "key": envelope.key, "message": envelope.message,
            "timestamp": envelope.timestamp,
            "headers": [[k, v.decode()] for k, v in envelope.headers],
            "ssp": [ssp.system, ssp.stream, ssp.partition]}))
