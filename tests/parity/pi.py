"""The pi translator's replay of a recorded thread cell (pi-bridge.md §4, §5): byte parity of the deltas.

Each cell's `provider→bridge` events (pi's session events) go through one `Translator` in wire order, the
session's memory reset at each construction as the bridge resets it ([M10]); an `agent_end` carries the leaf id
the recorded boundary names (pi's entry ids appear in no event, §9). The event-derived `thread/delta` batches
must equal the `.current` lane's, which also holds the bridge-originated ones (acceptances, resets, the context
window after `turn_end`, settle reports, `session.ended`); those are the session's, checked by the bridge's
parity, and set aside here by their shape. A delta's own members are compared in any order (the daemon decodes
them into its Structs; the reference writes a warning's `category` first); everything inside them, raw pi
payloads included, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bbridge.core import js
from bbridge.kit import encode_deltas
from bbridge.wire.lanes import PROVIDER_TO_BRIDGE, RUNTIME_TO_BRIDGE, bridge_lane, lane_path, read_lane
from bridges.pi.translate import Translator

CONSTRUCTIONS = ("thread/start", "thread/resume", "thread/fork")


def bridge_originated(deltas: list[dict[str, Any]]) -> bool:
    kinds = [d["kind"] for d in deltas]
    if kinds in (["session.reset"], ["input.accepted"], ["session.ended"], ["contextWindow"]):
        return True
    (first, *rest) = deltas
    return not rest and first["kind"] == "turn.boundary" and "providerCheckpointId" not in first


def recorded(cell: Path) -> tuple[list[str], list[tuple[float, str]]]:
    """The event-derived batches of the `.current` lane, and each recorded checkpoint with its position."""
    batches, checkpoints = [], []
    for entry in bridge_lane(cell):
        message = json.loads(entry.line)
        if message.get("method") != "thread/delta":
            continue
        deltas = message["params"]["deltas"]
        for delta in deltas:
            if delta["kind"] == "turn.boundary" and "providerCheckpointId" in delta:
                checkpoints.append((entry.seq, delta["providerCheckpointId"]))
        if not bridge_originated(deltas):
            batches.append(canonical(deltas))
    return batches, checkpoints


def canonical(deltas: list[dict[str, Any]]) -> str:
    return js.stringify([dict(sorted(delta.items())) for delta in deltas])


def produced(cell: Path, checkpoints: list[tuple[float, str]]) -> list[str]:
    translator = Translator()
    thread = json.loads((cell / "manifest.json").read_text())["threadId"]
    requests = read_lane(lane_path(cell, RUNTIME_TO_BRIDGE), RUNTIME_TO_BRIDGE)
    events = read_lane(lane_path(cell, PROVIDER_TO_BRIDGE), PROVIDER_TO_BRIDGE)
    batches: list[str] = []
    for entry in sorted(requests + events, key=lambda e: (e.run, e.seq)):
        message = json.loads(entry.line)
        if entry.dir == RUNTIME_TO_BRIDGE:
            if message.get("method") in CONSTRUCTIONS:
                translator.reset(message["params"]["threadId"])
            continue
        checkpoint = None
        if message.get("type") == "agent_end":
            checkpoint = next((c for seq, c in checkpoints if seq > entry.seq), None)
        deltas = translator.event(thread, message, checkpoint)
        if deltas:
            batches.append(canonical(js.parse(encode_deltas(thread, deltas))["deltas"]))
    return batches


def pair(cell: Path) -> tuple[list[str], list[str]]:
    """The event-derived delta batches the translator writes for `cell`, and the recorded ones."""
    want, checkpoints = recorded(cell)
    return produced(cell, checkpoints), want
