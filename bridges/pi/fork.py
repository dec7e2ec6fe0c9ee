"""`thread/fork` on pi's session files ([M11]): the source's branch, copied into the new thread's file.

pi's RPC has no command that forks into a file the bridge names (`--fork` refuses `--session`), so the bridge
writes the file itself, as pi's `createBranchedSession` does: a new header (`type: "session"`, a fresh id, the
cwd, `parentSession` = the source file) and the entries on the path from the root to the leaf (the checkpoint,
or the source's newest entry for a tip fork), re-chained without `label` entries.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SOURCE_MISSING = 'Cannot fork: source pi session file not found for thread "{id}"'
NOT_PERSISTED = "Cannot fork: forked pi session was not persisted"
SESSION_VERSION = 3


class ForkError(Exception):
    pass


def _entries(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if header is None and record.get("type") == "session":
            header = record
        elif isinstance(record, dict) and isinstance(record.get("id"), str):
            entries.append(record)
    if header is None:
        raise ForkError(NOT_PERSISTED)
    return header, entries


def branch(entries: list[dict[str, Any]], leaf: str | None) -> list[dict[str, Any]]:
    """The entries from the root to `leaf` (default: the newest entry), labels dropped and the rest re-chained."""
    by_id = {e["id"]: e for e in entries}
    target = leaf if leaf is not None else (entries[-1]["id"] if entries else None)
    if target is None:
        return []
    if target not in by_id:
        raise ForkError(f"Entry {target} not found")
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    current: dict[str, Any] | None = by_id[target]
    while current is not None and current["id"] not in seen:
        seen.add(current["id"])
        path.append(current)
        parent = current.get("parentId")
        current = by_id.get(parent) if isinstance(parent, str) else None
    path.reverse()
    chained: list[dict[str, Any]] = []
    parent_id: str | None = None
    for entry in path:
        if entry.get("type") == "label":
            continue
        chained.append({**entry, "parentId": parent_id})
        parent_id = entry["id"]
    return chained


def fork_file(source: Path, target: Path, source_id: str, cwd: str, checkpoint: str | None) -> None:
    """Write `target` as a fork of `source` at `checkpoint` (tip when None); `ForkError` with the reference text."""
    if not source.is_file():
        raise ForkError(SOURCE_MISSING.format(id=source_id))
    _, entries = _entries(source)
    kept = branch(entries, checkpoint)
    header = {
        "type": "session",
        "version": SESSION_VERSION,
        "id": str(uuid.uuid4()),
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "cwd": cwd,
        "parentSession": str(source),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        partial.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in (header, *kept)))
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ForkError(str(exc)) from None
