"""Record mode's lanes (protocol.md §5, §6.1): files of `{ts, run, seq, dir, line}` entries, written and read.

A cell is a folder of lane files `<direction>.ndjson`, one per direction; merged by `(run, seq)` they give wire
order. Writing: `Recorder` appends to `<root>/<scope>/<direction>.ndjson` with plain buffered appends flushed per
entry, and `RuntimeScoper` decides which thread a runtime-lane line belongs to (§5.4); both the daemon (runtime
lanes) and bridges written with the kit (provider lanes) use them, through the tee (`wire/tee.py`). Reading:
`read_lane`, `read_cell`, `find_cells`; a `bridge→runtime.current.ndjson` lane (re-recorded for grammar v3)
replaces the `bridge→runtime` lane when present.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import msgspec

from bbridge.core.nesting import MAX_JSON_DEPTH, too_deep
from bbridge.wire.redact import Redactor, write_counts

RUNTIME_TO_BRIDGE = "runtime→bridge"
BRIDGE_TO_RUNTIME = "bridge→runtime"
PROVIDER_TO_BRIDGE = "provider→bridge"
BRIDGE_TO_PROVIDER = "bridge→provider"
DIRECTIONS = (RUNTIME_TO_BRIDGE, BRIDGE_TO_RUNTIME, PROVIDER_TO_BRIDGE, BRIDGE_TO_PROVIDER)
CURRENT_SUFFIX = ".current"


class LaneEntry(msgspec.Struct, gc=False):
    """One recorded line of a lane, as read (`ts` and `run` may be absent); `_Written` is the one written."""

    seq: int | float
    dir: str
    line: str
    ts: int | float = 0
    run: int | float = 0


class RecordingError(ValueError):
    """A lane file that does not hold valid entries; the message names file and line."""


_entry_decoder = msgspec.json.Decoder(LaneEntry)


def read_lane(path: Path, direction: str) -> list[LaneEntry]:
    entries: list[LaneEntry] = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            if too_deep(raw):
                raise RecordingError(f"{path}:{number}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
            entry = _entry_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise RecordingError(f"{path}:{number}: {exc}") from None
        if too_deep(entry.line.encode()):  # the recorded line is decoded again by whoever replays it
            raise RecordingError(f"{path}:{number}: the recorded line nests deeper than {MAX_JSON_DEPTH} levels")
        if entry.dir != direction:
            raise RecordingError(f"{path}:{number}: dir {entry.dir!r} does not match lane {direction!r}")
        entries.append(entry)
    return entries


def lane_path(cell: Path, direction: str, current: bool = False) -> Path:
    return cell / f"{direction}{CURRENT_SUFFIX if current else ''}.ndjson"


def bridge_lane(cell: Path) -> list[LaneEntry]:
    """The `bridge→runtime` lane in file order, `.current` preferred."""
    current = lane_path(cell, BRIDGE_TO_RUNTIME, current=True)
    if current.exists():
        return read_lane(current, BRIDGE_TO_RUNTIME)
    plain = lane_path(cell, BRIDGE_TO_RUNTIME)
    return read_lane(plain, BRIDGE_TO_RUNTIME) if plain.exists() else []


def read_cell(cell: Path) -> list[LaneEntry]:
    """All four lanes merged into wire order (stable sort on `(run, seq)`)."""
    entries: list[LaneEntry] = []
    for direction in DIRECTIONS:
        if direction == BRIDGE_TO_RUNTIME:
            entries.extend(bridge_lane(cell))
            continue
        path = lane_path(cell, direction)
        if path.exists():
            entries.extend(read_lane(path, direction))
    entries.sort(key=lambda e: (e.run, e.seq))
    return entries


def is_cell(path: Path) -> bool:
    return path.is_dir() and lane_path(path, BRIDGE_TO_RUNTIME).exists()


def find_cells(root: Path) -> list[Path]:
    """Every folder under `root` that holds a `bridge→runtime` lane, sorted."""
    return sorted(p.parent for p in root.rglob(f"{BRIDGE_TO_RUNTIME}.ndjson") if is_cell(p.parent))


RECORD_ENV = "BB_PROVIDER_BRIDGE_RECORD_DIR"
PROCESS_SCOPE = "_process"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def record_dir_from_env(env: Mapping[str, str] = os.environ) -> Path | None:
    value = env.get(RECORD_ENV, "").strip()
    return Path(value) if value else None


def sanitize_scope(thread_id: str | None) -> str:
    """A thread id as a folder name; no thread means the process scope."""
    if not thread_id:
        return PROCESS_SCOPE
    scope = _UNSAFE.sub("-", thread_id)
    return "t-" + scope if not scope or scope.startswith("_") else scope


class _Written(msgspec.Struct):
    """An entry as `Recorder` writes it: the field order is the line's."""

    ts: int
    run: int
    seq: int
    dir: str
    line: str


class Recorder:
    """One per process: a shared `seq` over every lane and scope, `run` fixed at creation.

    With a `redactor`, each line is redacted before it is written and the matches are counted per scope, in a
    `.redacted-<run>-<pid>.json` file beside the scope's lanes (what the recording's README reports).
    """

    def __init__(self, root: Path, clock: Callable[[], float] = time.time, redactor: Redactor | None = None) -> None:
        self.root = root
        self._redactor = redactor if redactor else None
        self._redacted: dict[str, Counter[str]] = {}
        self._clock = clock
        self.run = int(clock() * 1000)
        self._seq = 0
        self._files: dict[tuple[str, str], IO[bytes]] = {}
        self._closed = False
        self._encoder = msgspec.json.Encoder()

    def record(self, direction: str, scope: str, line: bytes | str) -> None:
        if self._closed:
            return
        text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
        if self._redactor is not None:
            counts = self._redacted.setdefault(scope, Counter())
            before = counts.total()
            text = self._redactor.line(text, counts)
            if counts.total() != before:
                self._write_counts(scope, counts)
        self._seq += 1
        entry = _Written(int(self._clock() * 1000), self.run, self._seq, direction, text)
        try:
            handle = self._files.get((scope, direction))
            if handle is None:
                folder = self.root / scope
                folder.mkdir(parents=True, exist_ok=True)
                handle = self._files[(scope, direction)] = (folder / f"{direction}.ndjson").open("ab")
            handle.write(self._encoder.encode(entry) + b"\n")
            handle.flush()
        except OSError as exc:
            print(f"provider bridge recorder: failed to append to {self.root}: {exc}", file=sys.stderr)

    def _write_counts(self, scope: str, counts: Counter[str]) -> None:
        try:
            folder = self.root / scope
            folder.mkdir(parents=True, exist_ok=True)
            write_counts(folder, f"{self.run}-{os.getpid()}-{id(self):x}", counts)
        except OSError as exc:
            print(f"provider bridge recorder: failed to write redaction counts to {self.root}: {exc}", file=sys.stderr)

    def close(self) -> None:
        self._closed = True
        for handle in self._files.values():
            handle.close()
        self._files.clear()


class _Envelope(msgspec.Struct):
    id: str | int | float | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"null")


class _ThreadRef(msgspec.Struct):
    threadId: str | None = None


class RuntimeScoper:
    """Scope of runtime-lane lines: requests remember their id, responses look it up (§5.4)."""

    def __init__(self) -> None:
        self._requests: dict[str, dict[tuple[str, str | int | float], str]] = {
            RUNTIME_TO_BRIDGE: {},
            BRIDGE_TO_RUNTIME: {},
        }

    def scope(self, direction: str, line: bytes) -> str:
        try:
            message = msgspec.json.decode(line, type=_Envelope)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return PROCESS_SCOPE
        if message.method is not None:
            scope = sanitize_scope(_thread_of(message.params))
            if message.id is not None:
                self._requests[direction][(type(message.id).__name__, message.id)] = scope
            return scope
        if message.id is not None:
            other = BRIDGE_TO_RUNTIME if direction == RUNTIME_TO_BRIDGE else RUNTIME_TO_BRIDGE
            return self._requests[other].pop((type(message.id).__name__, message.id), PROCESS_SCOPE)
        return PROCESS_SCOPE


def _thread_of(params: msgspec.Raw) -> str | None:
    try:
        ref = msgspec.json.decode(params, type=_ThreadRef | None)
        return None if ref is None else ref.threadId
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
