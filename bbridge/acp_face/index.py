"""The sessions `bbridge acp` made, kept beside the daemon: what the client API does not say about a thread.

A daemon's thread has no `cwd` or provider in `daemon/status` once the daemon restarted, so the face keeps, per
session, its `cwd`, provider, model, mode and title in one JSON file (`--journal DIR`'s `acp-sessions.json` for an
in-process daemon, `--sessions FILE` else), re-read before each write and replaced whole (written to a temporary
file, then renamed), so several `bbridge acp` processes share it. Without a file the index lives in memory.

`session/list` pages through the records newest first (`page`): the cursor names the last record of the previous
page, so a session updated meanwhile moves to the front without shifting or repeating the rest.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import msgspec
import structlog

log = structlog.get_logger("bbridge.acp_face")

PAGE: Final = 50  # sessions per `session/list` answer


class Record(msgspec.Struct, kw_only=True):
    sessionId: str
    cwd: str
    providerId: str
    model: str | None = None
    effort: str | None = None
    mode: str | None = None
    title: str | None = None
    updatedAt: float = 0.0


class File(msgspec.Struct, kw_only=True):
    sessions: list[Record] = msgspec.field(default_factory=list)


class Index:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._records: dict[str, Record] = {}

    def _read(self) -> None:
        if self.path is None:
            return
        try:
            read = msgspec.json.decode(self.path.read_bytes(), type=File)
        except FileNotFoundError:
            return
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("the sessions index is unreadable; keeping what this process knows", path=str(self.path),
                        error=str(exc))  # fmt: skip
            return
        self._records.update({record.sessionId: record for record in read.sessions})

    def get(self, session_id: str) -> Record | None:
        self._read()
        return self._records.get(session_id)

    def all(self) -> list[Record]:
        self._read()
        return list(self._records.values())

    def put(self, record: Record) -> None:
        self._read()
        self._records[record.sessionId] = record
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            temporary.write_bytes(msgspec.json.encode(File(sessions=list(self._records.values()))))
            temporary.replace(self.path)
        except OSError as exc:
            log.warning("could not write the sessions index", path=str(self.path), error=str(exc))
            with contextlib.suppress(OSError):
                temporary.unlink()


class BadCursor(ValueError):
    """A `session/list` cursor this face did not write."""


def page(records: Iterable[Record], cursor: str | None, size: int = PAGE) -> tuple[list[Record], str | None]:
    """One page of `records`, newest first, after `cursor` (a previous page's `nextCursor`), and the cursor of the
    page after it (None: this is the last)."""
    ordered = sorted(records, key=_order)
    if cursor is not None:
        after = _order_of(cursor)
        ordered = [record for record in ordered if _order(record) > after]
    shown = ordered[:size]
    more = len(ordered) > size
    return shown, (f"{shown[-1].updatedAt!r} {shown[-1].sessionId}" if more else None)


def _order(record: Record) -> tuple[float, str]:
    return (-record.updatedAt, record.sessionId)


def _order_of(cursor: str) -> tuple[float, str]:
    updated, _, session_id = cursor.partition(" ")
    try:
        return (-float(updated), session_id)
    except ValueError:
        raise BadCursor(f"cursor {cursor!r}: not a nextCursor this agent gave (list again without one)") from None
