"""Traces of the daemon's work (issue 49): `[telemetry]` of `bbridge.toml` (`settings`, read without OpenTelemetry),
each thread's turns as spans from the events the daemon notices (`turns`), and the tracer the daemon calls
(`bbridge.seams.telemetry.Tracer`) on OpenTelemetry's SDK, exported over OTLP/HTTP (`otel`, imported by `tracer`
only when the file has the table: without it nothing of OpenTelemetry is imported).
"""

from __future__ import annotations

from importlib import metadata

from bbridge.seams.telemetry import Tracer
from bbridge.telemetry.settings import TelemetryConfig


def tracer(config: TelemetryConfig) -> Tracer:
    """The tracer of `config`: the SDK's, imported now (this is where OpenTelemetry enters the process)."""
    from bbridge.telemetry.otel import OtelTracer

    try:
        version = metadata.version("bbridge")
    except metadata.PackageNotFoundError:
        version = ""
    return OtelTracer(config, version=version)
