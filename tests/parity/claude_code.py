"""The Claude Code translator's replay of a recorded claude-code cell, byte for byte (spec §8.4, §9).

Each cell's runtime requests and CLI messages are replayed in wire order into translators, applying the runtime
requests the way the bridge would (a construction starts a fresh translator and writes `session.reset`, an
accepted turn or steer writes `input.accepted`, an interrupt writes the settlement and drops the old child's
later lines). The `thread/delta` lines produced must equal the cell's `bridge→runtime.current` ones, in order
(`tests/test_translate_parity.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.wire import rpc
from bbridge.wire.lanes import (
    BRIDGE_TO_PROVIDER,
    PROVIDER_TO_BRIDGE,
    RUNTIME_TO_BRIDGE,
    LaneEntry,
    bridge_lane,
    lane_path,
    read_lane,
)
from bridges.claude_code.translate import Translator, delta_params

CONSTRUCTIONS = ("thread/start", "thread/resume", "thread/fork")
CONTROL = ("control_request", "control_response", "control_cancel_request")


@dataclass
class _Session:
    translator: Translator
    child_live: bool = False  # the construction's child has been sent `initialize`
    closing: bool = False


@dataclass
class Replay:
    """The bridge's translation path over recorded lanes: the runtime requests that shape turns, and SDK messages."""

    sessions: dict[str, _Session] = field(default_factory=dict)
    thread: str | None = None  # the thread the CLI lines belong to (one session at a time in these cells)
    lines: list[bytes] = field(default_factory=list)

    def emit(self, thread_id: str, deltas: list[g.Delta]) -> None:
        if deltas:
            self.lines.append(rpc.encode_notification("thread/delta", msgspec.Raw(delta_params(thread_id, deltas))))

    def runtime(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params") or {}
        thread_id: str = params.get("threadId", "")
        if method in CONSTRUCTIONS:
            model = params.get("options", {}).get("model")
            self.sessions[thread_id] = _Session(Translator(thread_id, model))
            self.thread = thread_id
            self.emit(thread_id, [g.SessionReset()])
        elif method in ("turn/start", "turn/steer"):
            session = self.sessions[thread_id]
            self.emit(thread_id, session.translator.input_accepted(params["clientRequestId"]))
        elif method in ("thread/stop", "thread/discard"):
            live = self.sessions.get(thread_id)
            if live is not None and not live.closing:
                if method == "thread/stop" and params.get("intent") == "interrupt":
                    self.emit(thread_id, live.translator.settlement())
                live.closing = True

    def to_provider(self, message: dict[str, Any]) -> None:
        request = message.get("request")
        initialize = isinstance(request, dict) and request.get("subtype") == "initialize"
        if message.get("type") == "control_request" and initialize and self.thread is not None:
            self.sessions[self.thread].child_live = True

    def provider(self, message: dict[str, Any]) -> None:
        session = self.sessions.get(self.thread) if self.thread is not None else None
        if session is None or session.closing or not session.child_live or message.get("type") in CONTROL:
            return
        self.emit(session.translator.thread_id, session.translator.message(message))


def replay(cell: Path) -> list[bytes]:
    entries: list[LaneEntry] = []
    for direction in (RUNTIME_TO_BRIDGE, PROVIDER_TO_BRIDGE, BRIDGE_TO_PROVIDER):
        path = lane_path(cell, direction)
        if path.exists():
            entries.extend(read_lane(path, direction))
    entries.sort(key=lambda e: (e.run, e.seq))
    run = Replay()
    for entry in entries:
        message = js.parse(entry.line)
        if entry.dir == RUNTIME_TO_BRIDGE:
            run.runtime(message)
        elif entry.dir == BRIDGE_TO_PROVIDER:
            run.to_provider(message)
        else:
            run.provider(message)
    return run.lines


def recorded(cell: Path) -> list[str]:
    return [e.line for e in bridge_lane(cell) if js.parse(e.line).get("method") == "thread/delta"]


def pair(cell: Path) -> tuple[list[str], list[str]]:
    """The `thread/delta` lines the translator writes for `cell`, and the recorded ones."""
    return [line.decode() for line in replay(cell)], recorded(cell)
