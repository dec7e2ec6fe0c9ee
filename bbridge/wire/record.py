"""Record mode (protocol.md §5): lanes of `{ts, run, seq, dir, line}` entries.

`Recorder` writes `<root>/<scope>/<direction>.ndjson` with plain buffered
appends flushed per entry; `RuntimeScoper` decides which thread a runtime-lane
line belongs to (§5.4). Both the daemon (runtime lanes) and bridges written
with the kit (provider lanes) use them.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import msgspec

from bbridge.wire.recording import BRIDGE_TO_RUNTIME, RUNTIME_TO_BRIDGE

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


class _Entry(msgspec.Struct):
    ts: int
    run: int
    seq: int
    dir: str
    line: str


class Recorder:
    """One per process: a shared `seq` over every lane and scope, `run` fixed at creation."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.time) -> None:
        self.root = root
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
        self._seq += 1
        entry = _Entry(int(self._clock() * 1000), self.run, self._seq, direction, text)
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
