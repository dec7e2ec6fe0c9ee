"""Per-thread event journal with contiguous sequence numbers (daemon.md §4).

Every event delivered for a thread gets the next `seq` (from 1, forever,
across bridge restarts). Entries are kept pre-encoded (`{"seq":n,"event":…}`)
so one encoding serves the journal, live notifications and replays.

In memory the journal keeps the newest `bound` entries per thread. With a
directory it is also durable: one append-only NDJSON file per thread, written
with plain buffered writes and flushed to the OS after every batch; `fsync`
runs on `sync()` (shutdown) — a daemon crash loses nothing the OS accepted, a
machine crash may lose the last batches since the previous sync.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO
from urllib.parse import quote

import msgspec

from bbridge.core.events import Event

DEFAULT_BOUND = 10_000

_encoder = msgspec.json.Encoder()


class _Seq(msgspec.Struct):
    seq: int


class _Entry(msgspec.Struct, gc=False):
    """`{"seq":n,"event":…}`: one encoder call per entry, no intermediate dict."""

    seq: int
    event: Event


@dataclass
class _ThreadLog:
    last_seq: int = 0
    entries: deque[bytes] = field(default_factory=deque)  # the newest entries, seqs up to `last_seq` (contiguous)
    file: IO[bytes] | None = None

    def first_held(self) -> int:
        """The seq of the oldest entry held in memory (`last_seq + 1` when none is)."""
        return self.last_seq - len(self.entries) + 1


@dataclass
class Replay:
    """Entries after a seq; `missing_before` > 0 when older entries are gone (bound reached)."""

    entries: list[tuple[int, bytes]]
    last_seq: int
    missing_before: int = 0


class Journal:
    def __init__(self, bound: int = DEFAULT_BOUND, directory: Path | None = None) -> None:
        if bound < 1:
            raise ValueError("journal bound must be at least 1")
        self.bound = bound
        self.directory = directory
        self._threads: dict[str, _ThreadLog] = {}
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def _path(self, thread_id: str) -> Path:
        assert self.directory is not None
        return self.directory / (quote(thread_id, safe="") + ".ndjson")

    def _log(self, thread_id: str) -> _ThreadLog:
        log = self._threads.get(thread_id)
        if log is None:
            log = self._threads[thread_id] = _ThreadLog(entries=deque(maxlen=self.bound))
            if self.directory is not None:
                self._load(thread_id, log)
        return log

    def _load(self, thread_id: str, log: _ThreadLog) -> None:
        path = self._path(thread_id)
        if path.exists():
            stored = self._read_file(thread_id)
            log.entries.extend(raw for _, raw in stored)
            if stored:
                log.last_seq = stored[-1][0]
        log.file = path.open("ab")

    def append(self, thread_id: str, events: list[Event]) -> list[bytes]:
        """Assign seqs to one batch; returns the encoded `{seq, event}` entries."""
        log = self._threads.get(thread_id)
        if log is None:
            log = self._log(thread_id)
        encode = _encoder.encode
        seq = log.last_seq
        encoded: list[bytes] = []
        for event in events:
            seq += 1
            encoded.append(encode(_Entry(seq, event)))
        log.entries.extend(encoded)
        log.last_seq = seq
        if log.file is not None and encoded:
            log.file.write(b"\n".join(encoded) + b"\n")
            log.file.flush()
        return encoded

    def last_seq(self, thread_id: str) -> int:
        log = self._threads.get(thread_id)
        if log is None and self.directory is not None and self._path(thread_id).exists():
            log = self._log(thread_id)
        return 0 if log is None else log.last_seq

    def after(self, thread_id: str, after_seq: int) -> Replay:
        """Everything with seq > after_seq that is still held, in order."""
        log = self._threads.get(thread_id)
        if log is None and self.directory is not None and self._path(thread_id).exists():
            log = self._log(thread_id)
        if log is None:
            return Replay([], 0)
        first_held = log.first_held()
        skip = max(0, after_seq + 1 - first_held)
        entries = list(zip(range(first_held + skip, log.last_seq + 1), islice(log.entries, skip, None), strict=True))
        if self.directory is not None and after_seq + 1 < first_held:
            entries = [entry for entry in self._read_file(thread_id) if entry[0] > after_seq]
            first_held = entries[0][0] if entries else log.last_seq + 1
        missing = first_held - 1 if after_seq + 1 < first_held else 0
        return Replay(entries, log.last_seq, missing)

    def _read_file(self, thread_id: str) -> list[tuple[int, bytes]]:
        out = []
        for raw in self._path(thread_id).read_bytes().split(b"\n"):
            if raw.strip():
                out.append((msgspec.json.decode(raw, type=_Seq).seq, raw))
        return out

    def threads(self) -> dict[str, int]:
        return {tid: log.last_seq for tid, log in self._threads.items()}

    def sync(self) -> None:
        """Flush and fsync every durable file (shutdown)."""
        for log in self._threads.values():
            if log.file is not None:
                log.file.flush()
                os.fsync(log.file.fileno())

    def close(self) -> None:
        self.sync()
        for log in self._threads.values():
            if log.file is not None:
                log.file.close()
                log.file = None


def entries_json(entries: list[tuple[int, bytes]]) -> msgspec.Raw:
    """A JSON array of pre-encoded entries, embeddable in a message without re-encoding."""
    return msgspec.Raw(b"[" + b",".join(raw for _, raw in entries) + b"]")
