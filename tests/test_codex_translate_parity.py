"""The codex translator against every recorded cell (spec §3, §5, §7): byte parity of the deltas.

Each cell's provider lane is fed through a fresh `Translator`/`DeltaPath` per session construction, in
wire order, with the runtime requests and codex answers that shape translator state applied as the
bridge applies them (§2.4–§2.8). The produced `thread/delta` batches must equal the recorded
`bridge→runtime(.current)` ones; cells in `codex_translate_gaps.json` are known to differ and must.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.wire.recording import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, RUNTIME_TO_BRIDGE, bridge_lane, read_cell
from bridges.codex.session import delta_params
from bridges.codex.translate import DeltaPath, Translator, codex_thread

ROOT = Path(__file__).resolve().parents[2] / "shared" / "recordings" / "codex"
GAPS = Path(__file__).with_name("codex_translate_gaps.json")
CELLS = (
    sorted(path.name for path in ROOT.iterdir() if (path / "provider→bridge.ndjson").exists()) if ROOT.exists() else []
)


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


def first_difference(got: list[str], want: list[str]) -> str:
    for index, (mine, theirs) in enumerate(zip(got, want, strict=False)):
        if mine != theirs:
            return f"batch {index}:\n got  {mine}\n want {theirs}"
    return f"batch counts differ: got {len(got)}, want {len(want)}"


@pytest.mark.parametrize("cell", CELLS)
def test_cell_parity(cell: str) -> None:
    gaps: dict[str, str] = json.loads(GAPS.read_text())
    got, want = produced(ROOT / cell), recorded(ROOT / cell)
    if cell in gaps:
        assert got != want, f"{cell} now matches: remove it from {GAPS.name}"
    else:
        assert got == want, first_difference(got, want)


def test_gaps_name_recorded_cells() -> None:
    gaps: dict[str, str] = json.loads(GAPS.read_text())
    assert set(gaps) <= set(CELLS)
