"""structlog on stderr: JSON lines when stderr is not a terminal, readable lines when it is (`bbridge serve
--log-format console|json` chooses).

A bridge whose specification fixes its diagnostics (the Claude Code bridge: `claude-code bridge: <message>`)
passes a `prefix` and gets one plain line per event instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def prefixed_renderer(prefix: str) -> structlog.typing.Processor:
    """`<prefix><event>`, then ` key=value` for the context; newlines escaped so an event stays one line."""

    def render(_logger: Any, _name: str, event: structlog.typing.EventDict) -> str:
        text = prefix + str(event.pop("event", "")) + "".join(f" {k}={v}" for k, v in event.items())
        return text.replace("\n", "\\n")

    return render


FORMATS = ("console", "json")


def configure(level: str = "info", *, prefix: str | None = None, fmt: str | None = None) -> None:
    """Logs at `level` and above; `fmt` console or json (None: console on a terminal, else json)."""
    if fmt is None:
        fmt = "console" if sys.stderr.isatty() else "json"
    processors: list[structlog.typing.Processor] = [structlog.contextvars.merge_contextvars]
    renderer: structlog.typing.Processor
    if prefix is not None:
        renderer = prefixed_renderer(prefix)
    else:
        processors += [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True)]
        renderer = (
            structlog.dev.ConsoleRenderer(colors=False) if fmt == "console" else structlog.processors.JSONRenderer()
        )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
