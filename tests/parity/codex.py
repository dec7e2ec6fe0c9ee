"""What codex parity checks beyond the shared shape: the translator's replay, and the bridge's control lane.

Translator (spec §3, §5, §7; `tests/test_translate_parity.py`): each cell's provider lane is fed through a fresh
`Translator`/`DeltaPath` per session construction, in wire order, with the runtime requests and codex answers that
shape translator state applied as the bridge applies them (§2.4–§2.8). The produced `thread/delta` batches must equal the recorded
`bridge→runtime(.current)` ones.

Control lane (`tests/test_bridge_parity.py`, from the same replay as the events): every other line the bridge
wrote (results, errors, `thread/identity`, `error`, `session/replaced`, its own requests) equals the cell's
`bridge→runtime.current` lane, byte for byte as JSON text, in order. Excluded: the harness's own `initialize`,
and answers to the maintenance methods, which describe the recording host (codex-bridge.md §2.3: not replayed).
The `model-list` cell's recorded `initialize` result predates `grammarVersions` and `steerMode`; it is compared
with the line the reference emits today (§2.1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.replay import bridge_parity
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, RUNTIME_TO_BRIDGE, bridge_lane, read_cell
from bridges.codex.session import DeltaPath, delta_params
from bridges.codex.translate import Translator, codex_thread
from tests.support import capabilities

HOST_DEPENDENT = frozenset(
    {"provider/health", "provider/usage", "provider/installation/status", "provider/installation/run"}
)
CURRENT_CAPABILITIES = capabilities(
    sessionRestore=True, threadArchive=True, threadRename=True, threadGoalClear=True, fork="checkpoint",
    approvalEnforcedBy="runtime", steerMode="inject",
)  # fmt: skip


@dataclass
class Session:
    """What the bridge's session record contributes to translation (§2.11)."""

    translator: Translator
    path: DeltaPath
    codex_thread: str | None = None
    batches: list[str] = field(default_factory=list)

    def emit(self, deltas: list[g.Delta] | None) -> None:
        if deltas:
            self.batches.append(js.stringify(json.loads(delta_params("thr", deltas))["deltas"]))

    def announce(self, codex_id: str) -> None:
        if self.codex_thread is None:
            self.codex_thread = codex_id
        self.emit(self.path.announce())


def bb_tools(params: dict[str, Any]) -> dict[str, g.Presentation | None]:
    """The bb-injected dynamic tools of a construction, with their presentations."""
    options = params.get("options")
    tools = params.get("dynamicTools") or (options.get("dynamicTools") if isinstance(options, dict) else None) or []
    found: dict[str, g.Presentation | None] = {}
    for tool in tools:
        shown = tool.get("presentation")
        found[tool["name"]] = msgspec.convert(shown, g.Presentation) if isinstance(shown, dict) else None
    return found


def produced(cell: Path) -> list[str]:
    """The `thread/delta` batches the translator writes for a cell, as JSON text of the delta lists."""
    batches: list[str] = []
    session: Session | None = None
    requests: dict[Any, tuple[str, dict[str, Any]]] = {}
    steers: dict[Any, dict[str, Any]] = {}
    run: float | None = None

    def close() -> None:
        nonlocal session
        if session is not None:
            batches.extend(session.batches)
            session.batches.clear()
        session = None

    for entry in read_cell(cell):
        if entry.run != run:
            close()
            run, requests = entry.run, {}
        message = js.parse(entry.line)
        method, params = message.get("method"), message.get("params")
        if entry.dir == RUNTIME_TO_BRIDGE and isinstance(params, dict):
            if method in ("thread/start", "thread/fork", "thread/resume"):
                close()
                session = Session(
                    Translator(bb_tools(params)), DeltaPath(awaiting_replayed_usage=method != "thread/start")
                )
                if method == "thread/resume":
                    session.announce(params["providerThreadId"])
                session.emit(session.path.push([g.SessionReset()]))
            elif method == "turn/start" and session is not None and session.codex_thread is not None:
                session.translator.queue_input(session.codex_thread, params["clientRequestId"])
            elif method == "thread/stop" and params.get("intent") == "release":
                close()
        elif entry.dir == BRIDGE_TO_PROVIDER and method is not None and "id" in message:
            requests[message["id"]] = (method, params if isinstance(params, dict) else {})
            if method == "turn/steer":
                steers[message["id"]] = params
        elif entry.dir == PROVIDER_TO_BRIDGE and session is not None:
            if method is not None and "id" not in message:
                if method == "thread/started" and isinstance(params, dict):
                    started = codex_thread(params)
                    if started:
                        session.announce(started)
                session.emit(session.path.push(session.translator.translate(message)))
            elif method is None:
                answered, _ = requests.pop(message.get("id"), ("", {}))
                result = message.get("result")
                failed = "error" in message
                if answered in ("thread/start", "thread/fork") and not failed:
                    session.announce(result["thread"]["id"])
                elif answered == "thread/resume" and failed:
                    close()
                elif answered == "account/rateLimits/read" and not failed:
                    session.translator.seed_rate_limits(result)
                elif answered == "turn/steer" and not failed:
                    steer = steers.pop(message.get("id"))
                    accepted = g.InputAccepted(
                        clientRequestId=runtime_steer_id(cell, steer), providerTurnId=steer["expectedTurnId"]
                    )
                    session.emit(session.path.push([accepted]))
    close()
    return batches


def runtime_steer_id(cell: Path, steer: dict[str, Any]) -> str:
    """The client request id of the runtime's `turn/steer` (codex's request does not carry it)."""
    for entry in read_cell(cell):
        message = js.parse(entry.line)
        if entry.dir == RUNTIME_TO_BRIDGE and message.get("method") == "turn/steer":
            params = message["params"]
            if params.get("expectedTurnId") == steer.get("expectedTurnId"):
                return str(params["clientRequestId"])
    raise AssertionError("no runtime turn/steer")


def recorded(cell: Path) -> list[str]:
    batches: list[str] = []
    for entry in bridge_lane(cell):
        message = js.parse(entry.line)
        if message.get("method") == "thread/delta":
            batches.append(js.stringify(message["params"]["deltas"]))
    return batches


def pair(cell: Path) -> tuple[list[str], list[str]]:
    """The delta batches the translator writes for `cell`, and the recorded ones."""
    return produced(cell), recorded(cell)


def runtime_methods(cell: Path) -> dict[Any, str]:
    """The method of each runtime request id in the cell."""
    methods: dict[Any, str] = {}
    for entry in read_cell(cell):
        if entry.dir == RUNTIME_TO_BRIDGE:
            message = js.parse(entry.line)
            if isinstance(message, dict) and "id" in message and isinstance(message.get("method"), str):
                methods[message["id"]] = message["method"]
    return methods


def comparable(message: dict[str, Any], methods: dict[Any, str]) -> bool:
    if message.get("method") == "thread/delta" or message.get("id") == "parity-initialize":
        return False
    answered = methods.get(message["id"]) if "method" not in message and "id" in message else None
    return answered not in HOST_DEPENDENT


def expected_control(cell: Path) -> list[str]:
    methods = runtime_methods(cell)
    lines: list[str] = []
    for entry in bridge_lane(cell):
        message = js.parse(entry.line)
        if not comparable(message, methods):
            continue
        if "method" not in message and methods.get(message.get("id")) == "initialize":
            message["result"]["capabilities"] = CURRENT_CAPABILITIES
        lines.append(js.stringify(message))
    return lines


def control_lane_difference(cell: Path, run: bridge_parity.Run) -> str | None:
    """Where the bridge's control lines for `cell` differ from the recorded lane, or None."""
    methods = runtime_methods(cell)
    if [js.stringify(m) for m in run.control if comparable(m, methods)] == expected_control(cell):
        return None
    return f"{cell.name}: control lines differ"
