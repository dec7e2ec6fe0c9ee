"""Per-thread event journal with contiguous sequence numbers (daemon.md §4).

Every event delivered for a thread gets the next `seq` (from 1, forever,
across bridge restarts). Entries are kept pre-encoded (`{"seq":n,"event":…}`)
so one encoding serves the journal, live notifications and replays.

In memory the journal keeps the newest `bound` entries per thread. With a
directory it is also durable: one append-only NDJSON file per thread, written
with plain buffered writes and flushed to the OS after every batch; `fsync`
runs on `sync()` (shutdown) — a daemon crash loses nothing the OS accepted, a
machine crash may lose the last batches since the previous sync.

Files are named after their thread: `<id>.ndjson` for a plain id (ASCII
letters, digits, `_`, `-`, `.`; at most 128 bytes; not starting with `.`),
`~<sha256 of the id>.ndjson` for any other, so no id can make a name too long
or unsafe. The disk never stops live delivery: a torn or corrupt tail found at
load is cut back to the last good entry and a corrupt entry inside the file is
skipped (a thread's seq continues after the greatest good seq, never from an
earlier one); a failed write (disk full, permissions) is logged and counted,
and the events still go out; the next write starts on a fresh line. `health()`
reports all of it for `daemon/status`.

A restarted daemon knows every thread journaled in its directory (`threads()`, for `daemon/status` and so for
`bbridge tail --after-seq`), each with its last seq read from the end of its file; a thread's file is read whole
only when the thread is asked for or written to.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import structlog

from bbridge.core.event_log import EventLog, ThreadLog
from bbridge.core.events import Event
from bbridge.core.nesting import too_deep

_logger = structlog.get_logger("bbridge.daemon.journal")

DEFAULT_BOUND = 10_000
INDEX_TAIL_BYTES = 1 << 16  # the end of a file read at start for its last entry (the whole file when it holds none)

_PLAIN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def file_name(thread_id: str) -> str:
    """The journal file of a thread: its id when plain, else a hash of it (never too long, never unsafe)."""
    if _PLAIN_ID.fullmatch(thread_id):
        return thread_id + ".ndjson"
    return "~" + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest() + ".ndjson"


def beside(directory: Path, thread_id: str, kind: str) -> Path:
    """A file kept beside a thread's journal, `<thread>.<kind>.ndjson` (its resolutions, its inputs): named as the
    journal is, and never read as a thread's journal (its lines are no entries)."""
    return directory / file_name(thread_id).replace(".ndjson", f".{kind}.ndjson")


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def append_record(path: Path, record: dict[str, Any]) -> None:
    """One JSON line appended to a file beside a journal (`beside`), on a line of its own even after a torn last
    line (a crash mid-write loses that line only); raises `OSError`."""
    with path.open("a+b") as out:
        torn = False
        if out.tell() > 0:
            out.seek(-1, os.SEEK_END)
            torn = out.read(1) != b"\n"
        out.write((b"\n" if torn else b"") + _line(record))


def replace_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """The file made of `records` alone, replaced whole and synced to the disk first (a crash, of the process or the
    machine, leaves the old file or the new one); raises `OSError`."""
    scratch = path.with_name(path.name + ".new")
    with scratch.open("wb") as out:
        out.writelines(_line(record) for record in records)
        out.flush()
        os.fsync(out.fileno())
    os.replace(scratch, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def latest_beside(directory: Path, kind: str) -> list[dict[str, Any]]:
    """The last object of every `<thread>.<kind>.ndjson` file in `directory` (a restart reading back what it kept)."""
    return [record for path in sorted(directory.glob(f"*.{kind}.ndjson")) for record in read_records(path, 1)]


def count_lines(path: Path) -> int:
    """The lines of a file beside a journal (a missing one has none), counted without decoding them."""
    try:
        with path.open("rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 16), b""))
    except FileNotFoundError:
        return 0


def read_records(path: Path, last: int, trim: bool = False, strict: bool = False) -> list[dict[str, Any]]:
    """The last `last` objects of a file beside a journal; a missing file reads as none, bad lines are skipped.
    `trim`: a file of more than twice `last` lines is rewritten as its last `last` (those it keeps), so a file kept
    bounded in memory is bounded on disk too. `strict`: a file that exists but cannot be read raises (else: none)."""
    try:
        lines = path.read_bytes().split(b"\n")  # only at b"\n": a record's text may hold U+2028 and its kind raw
    except FileNotFoundError:
        return []
    except OSError:
        if strict:
            raise
        return []
    if lines and not lines[-1]:
        lines.pop()
    records = []
    for line in lines[-last:]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    if trim and len(lines) > 2 * last:
        try:
            replace_records(path, records)
        except OSError as exc:
            _logger.warning("could not trim a file beside the journal", path=str(path), error=str(exc))
    return records


class _Entry(msgspec.Struct, gc=False):
    """`{"seq":n,"event":…}`, as a journal file's line is read back."""

    seq: int
    event: Event


class _Stamped(msgspec.Struct, gc=False):
    threadId: str


class _Last(msgspec.Struct, gc=False):
    """A journal line as the start-up index reads it: its seq and its event's thread."""

    seq: int
    event: _Stamped


def _last_entry(data: bytes, whole: bool) -> _Last | None:
    """The last line of `data` that is an entry; `whole`: `data` starts at a line's start (else its first line,
    perhaps cut, is not read)."""
    lines = data.split(b"\n")
    for raw in reversed(lines if whole else lines[1:]):
        if raw.strip() and not too_deep(raw):
            try:
                return msgspec.json.decode(raw, type=_Last)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return None


@dataclass
class _File:
    """A thread's journal file; `torn`: a failed write may have left a partial line, the next starts anew;
    `failed`: a write failed, so the file misses entries memory has."""

    handle: IO[bytes]
    torn: bool = False
    failed: bool = False


@dataclass
class _Scan:
    """A journal file read back: its good entries, where the good part ends, what was wrong with the rest."""

    entries: list[tuple[int, bytes]]
    good_end: int  # byte offset just past the last good entry (and its newline, when it had one)
    newline: bool  # the last good entry is newline-terminated (or there is none)
    corrupt: int  # bad entries before the last good one (skipped)
    torn_tail: bool  # bytes after the last good entry (cut off at load)


def _scan(data: bytes) -> _Scan:
    entries: list[tuple[int, bytes]] = []
    good_end, newline, corrupt, pending_bad, last = 0, True, 0, 0, 0
    offset = 0
    for raw in data.split(b"\n"):
        end = offset + len(raw)
        offset = end + 1
        if not raw.strip():
            continue
        seq = _entry_seq(raw)
        if seq is None or seq <= last:
            pending_bad += 1
            continue
        entries.append((seq, raw))
        last, corrupt, pending_bad = seq, corrupt + pending_bad, 0
        newline = end < len(data)
        good_end = end + 1 if newline else end
    return _Scan(entries, good_end, newline, corrupt, good_end < len(data.rstrip(b"\n")) or pending_bad > 0)


def _entry_seq(raw: bytes) -> int | None:
    if too_deep(raw):
        return None
    try:
        return msgspec.json.decode(raw, type=_Entry).seq
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


@dataclass
class JournalHealth:
    """What the disk did to the journal since start (counted, logged; `daemon/status` shows it)."""

    truncated_tails: int = 0
    corrupt_entries: int = 0
    write_errors: int = 0
    last_error: str | None = None


@dataclass
class Replay:
    """Entries after a seq; `missing_before` > 0 when older entries are gone (bound reached)."""

    entries: list[tuple[int, bytes]]
    last_seq: int
    missing_before: int = 0


class Journal:
    """The daemon's journal: the core's in-memory `EventLog` (`log`, which the hot path records into
    directly), plus, with a directory, one durable file per thread."""

    def __init__(self, bound: int = DEFAULT_BOUND, directory: Path | None = None) -> None:
        self.log = EventLog(bound, self._open if directory is not None else None)
        self.directory = directory
        self._files: dict[str, _File] = {}
        self.health_counts = JournalHealth()
        self._on_disk: dict[str, int] = {}  # threads journaled before this start: their last seq
        self._parked: dict[str, int] = {}  # threads let go (`let_go`): their last seq, their file whole and closed
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._on_disk = self._index(directory)

    def _index(self, directory: Path) -> dict[str, int]:
        """Every thread with a journal file in `directory`, and its last seq: the last entry of the file's end
        names both. A file whose entries name another thread (`<thread>.interactions.ndjson` beside it, a stray
        file) is not a thread's."""
        found: dict[str, int] = {}
        for path in sorted(directory.glob("*.ndjson")):
            try:
                with path.open("rb") as file:
                    size = file.seek(0, os.SEEK_END)
                    file.seek(max(0, size - INDEX_TAIL_BYTES))
                    last = _last_entry(file.read(), whole=size <= INDEX_TAIL_BYTES)
                    if last is None and size > INDEX_TAIL_BYTES:
                        file.seek(0)
                        last = _last_entry(file.read(), whole=True)
            except OSError as exc:
                self._failed(path.name, "could not read a journal file at start; its thread is not listed", exc)
                continue
            if last is not None and file_name(last.event.threadId) == path.name:
                found[last.event.threadId] = last.seq
        return found

    def _path(self, thread_id: str) -> Path:
        assert self.directory is not None
        return self.directory / file_name(thread_id)

    def let_go(self, thread_id: str) -> None:
        """The thread was released (`threads.Piece.EVENTS`): with a directory, its entries leave memory and its file
        is closed, since the file has them all; its next event opens the file again to append (without reading
        it), and a replay reads it. A thread whose file missed a write keeps both, since memory then has more."""
        log = self.log.threads.get(thread_id)
        file = self._files.get(thread_id)
        if log is None or file is None or file.torn or file.failed:
            return
        try:  # synced first: `sync` at shutdown no longer sees it
            file.handle.flush()
            os.fsync(file.handle.fileno())
        except OSError as exc:
            file.torn = file.failed = True
            self._failed(thread_id, "could not sync the thread's journal file; its events stay in memory", exc)
            return
        with contextlib.suppress(OSError):  # what it wrote is on disk; the descriptor is closed even when this fails
            file.handle.close()
        del self._files[thread_id], self.log.threads[thread_id]
        self._parked[thread_id] = log.last_seq

    def _open(self, thread_id: str, log: ThreadLog) -> None:
        """A thread's log is new: load its file's good entries into it and append to that file from now on (a
        thread let go only appends: its file ends with its last entry)."""
        path = self._path(thread_id)
        parked = self._parked.pop(thread_id, None)
        if parked is not None:
            log.last_seq = parked
        scan = None
        try:
            scan = _scan(path.read_bytes()) if parked is None and path.exists() else None
            if scan is not None and scan.torn_tail:
                os.truncate(path, scan.good_end)
            file = self._files[thread_id] = _File(path.open("ab"), torn=scan is not None and not scan.newline)
            log.write = functools.partial(self._write, thread_id, file)
        except OSError as exc:
            self._failed(thread_id, "could not open the thread's journal file; its events stay in memory", exc)
        if scan is None:
            return
        entries = scan.entries
        if entries:  # memory holds a contiguous run of seqs: the file's after its last gap (a write that failed)
            run = len(entries) - 1
            while run > 0 and entries[run - 1][0] == entries[run][0] - 1:
                run -= 1
            log.extend([raw for _, raw in entries[run:]])
            log.last_seq = entries[-1][0]
        health = self.health_counts
        if scan.torn_tail:
            health.truncated_tails += 1
            _logger.warning(
                "cut a torn journal tail back to the last good entry", threadId=thread_id, lastSeq=log.last_seq
            )
        if scan.corrupt:
            health.corrupt_entries += scan.corrupt
            _logger.warning("skipped corrupt journal entries", threadId=thread_id, count=scan.corrupt)

    def _write(self, thread_id: str, file: _File, entries: list[bytes]) -> None:
        try:
            if file.torn:
                file.handle.write(b"\n")
                file.torn = False
            file.handle.write(b"\n".join(entries) + b"\n")
            file.handle.flush()
        except OSError as exc:
            file.torn = file.failed = True
            self._failed(thread_id, "journal write failed; the events were still delivered", exc)

    def _failed(self, thread_id: str, what: str, exc: OSError) -> None:
        health = self.health_counts
        health.write_errors += 1
        health.last_error = f"{thread_id}: {exc.strerror or exc}"
        _logger.error(what, threadId=thread_id, error=str(exc))

    def _known(self, thread_id: str) -> ThreadLog | None:
        """The thread's log, loaded from its file when it has one and nothing was recorded yet."""
        log = self.log.threads.get(thread_id)
        if log is None and self.directory is not None and self._path(thread_id).exists():
            log = self.log.thread(thread_id)
        return log

    def last_seq(self, thread_id: str) -> int:
        parked = self._parked.get(thread_id)
        if parked is not None:
            return parked
        log = self._known(thread_id)
        return 0 if log is None else log.last_seq

    def after(self, thread_id: str, after_seq: int) -> Replay:
        """Everything with seq > after_seq that is still held, in order: memory's, and before them its file's (those
        past the memory bound, or all of a thread let go; memory's own are kept, the file may have missed some)."""
        parked = self._parked.get(thread_id)
        log = None if parked is not None else self._known(thread_id)
        entries: list[tuple[int, bytes]] = []
        if log is not None:
            last, first = log.last_seq, log.first_held()
            skip = max(0, after_seq + 1 - first)
            entries = list(zip(range(first + skip, last + 1), log.entries(skip), strict=True))
        elif parked is not None:
            last = parked
            first = last + 1
        else:
            return Replay([], 0)
        if self.directory is not None and after_seq + 1 < first:
            entries = [entry for entry in self._read_file(thread_id) if after_seq < entry[0] < first] + entries
            first = entries[0][0] if entries else last + 1
        return Replay(entries, last, first - 1 if after_seq + 1 < first else 0)

    def _read_file(self, thread_id: str) -> list[tuple[int, bytes]]:
        try:
            return _scan(self._path(thread_id).read_bytes()).entries
        except OSError as exc:
            self._failed(thread_id, "could not read the thread's journal file", exc)
            return []

    def health(self) -> dict[str, Any]:
        """The `journal` section of `daemon/status`."""
        counts = self.health_counts
        return {
            "dir": None if self.directory is None else str(self.directory),
            "bound": self.log.bound,
            "healthy": counts.write_errors == 0,
            "truncatedTails": counts.truncated_tails,
            "corruptEntries": counts.corrupt_entries,
            "writeErrors": counts.write_errors,
            "lastError": counts.last_error,
        }

    def threads(self) -> dict[str, int]:
        """Every thread known, with its last seq: those journaled before this start and those heard from since."""
        known = dict(self._on_disk)
        known.update(self._parked)
        known.update((tid, log.last_seq) for tid, log in self.log.threads.items())
        return known

    def sync(self) -> None:
        """Flush and fsync every durable file (shutdown)."""
        for thread_id, file in self._files.items():
            try:
                file.handle.flush()
                os.fsync(file.handle.fileno())
            except OSError as exc:
                self._failed(thread_id, "journal sync failed", exc)

    def close(self) -> None:
        self.sync()
        for thread_id, file in self._files.items():
            try:
                file.handle.close()
            except OSError as exc:
                self._failed(thread_id, "journal close failed", exc)
            log = self.log.threads.get(thread_id)
            if log is not None:
                log.write = None
        self._files.clear()


def entries_json(entries: list[tuple[int, bytes]]) -> msgspec.Raw:
    """A JSON array of pre-encoded entries, embeddable in a message without re-encoding."""
    return msgspec.Raw(b"[" + b",".join(raw for _, raw in entries) + b"]")
