"""structlog on stderr: JSON lines when stderr is not a terminal, readable lines when it is.

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


def configure(level: str = "info", *, prefix: str | None = None) -> None:
    processors: list[structlog.typing.Processor] = [structlog.contextvars.merge_contextvars]
    renderer: structlog.typing.Processor
    if prefix is not None:
        renderer = prefixed_renderer(prefix)
    else:
        processors += [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True)]
        renderer = (
            structlog.dev.ConsoleRenderer(colors=False) if sys.stderr.isatty() else structlog.processors.JSONRenderer()
        )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
