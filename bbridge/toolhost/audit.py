"""`[tool_audit]`: one JSON line per hosted call, and the `redact` patterns applied to what leaves a tool.

```toml
[tool_audit]
path = "/var/log/bbridge/tool-audit.ndjson"   # default: tool-audit.ndjson in --journal's directory, else none
redact = ["ghp_[A-Za-z0-9]{36}", "(?i)password=\\S+"]
```

A line holds the time, the thread (and provider, turn, call), the tool and its source, the SHA-256 of the
arguments' canonical JSON (sorted keys, no spaces) and their shape (keys and value types: never a value), the
decision and who made it, how the call ended, its exit status, attempts, duration and stdout bytes. `redact`
patterns replace each match with `[redacted]` in a result's text before the model sees it and in any text the
host logs; they are checked like `[[tool_rules]]`' patterns (policy.compile_pattern).
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bbridge.config_file import Refusal
from bbridge.toolhost.policy import compile_pattern
from bbridge.toolhost.results import ToolCallResult

log = structlog.get_logger("bbridge.toolhost")

DEFAULT_NAME = "tool-audit.ndjson"
REDACTED = "[redacted]"
SHAPE_ITEMS = 8  # an array's shape lists its first distinct element shapes, at most this many


class _AuditTable(msgspec.Struct, forbid_unknown_fields=True):
    path: str | None = None
    redact: list[str] = []


@dataclass(frozen=True)
class Redactor:
    patterns: tuple[re.Pattern[str], ...] = ()

    def text(self, text: str) -> str:
        for pattern in self.patterns:
            text = pattern.sub(REDACTED, text)
        return text

    def result(self, result: ToolCallResult) -> ToolCallResult:
        """`result` with every text item redacted (images pass as they are)."""
        if not self.patterns:
            return result
        items = [
            {**item, "text": self.text(item["text"])} if item.get("type") == "inputText" else item
            for item in result.get("contentItems", [])
        ]
        return {**result, "contentItems": items}


class Audit:
    """The audit file (None: calls are not audited) and the redaction; lines are appended, one write each."""

    def __init__(self, path: Path | None = None, redactor: Redactor | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor()
        self._file: io.TextIOWrapper | None = None

    def record(self, line: dict[str, Any]) -> None:
        """Append one call's line (opened on first use, kept open, flushed each line)."""
        if self.path is None:
            return
        stamped = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), **line}
        try:
            if self._file is None:
                self._file = self.path.open("a", encoding="utf-8", buffering=1)
            self._file.write(msgspec.json.encode(stamped).decode() + "\n")
        except OSError as exc:  # the call's answer matters more than its line: say so, and go on
            log.error("tool audit line not written", path=str(self.path), error=str(exc), tool=line.get("tool"))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load_audit(table: Any, journal_dir: Path | None) -> tuple[Audit, list[Refusal]]:
    """The `[tool_audit]` table (None: absent); a broken key is refused and left at its default (no redaction
    is dropped silently: a refused pattern is listed)."""
    default = journal_dir / DEFAULT_NAME if journal_dir is not None else None
    if table is None:
        return Audit(default), []
    try:
        raw = msgspec.convert(table, _AuditTable)
    except msgspec.ValidationError as exc:
        return Audit(default), [Refusal("tool_audit", None, str(exc))]
    refused: list[Refusal] = []
    patterns: list[re.Pattern[str]] = []
    for index, text in enumerate(raw.redact):
        try:
            patterns.append(compile_pattern(text))
        except ValueError as exc:
            refused.append(Refusal("tool_audit", f"redact[{index}]", str(exc)))
    path = Path(raw.path).expanduser() if raw.path else default
    return Audit(path, Redactor(tuple(patterns))), refused


def digest(arguments: Any) -> str:
    """The SHA-256 of the arguments' canonical JSON: equal arguments, equal digests, and no value in the log."""
    return hashlib.sha256(msgspec.json.encode(arguments, order="sorted")).hexdigest()


def shape(value: Any) -> Any:
    """The arguments' shape: an object's keys with their shapes, an array's distinct element shapes, else the
    JSON type's name."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        shapes: list[Any] = []
        for item in value:
            one = shape(item)
            if one not in shapes:
                shapes.append(one)
            if len(shapes) == SHAPE_ITEMS:
                break
        return shapes
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string"
