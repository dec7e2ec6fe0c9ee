"""Core throughput over recorded `thread/delta` lines, and the coalescing ratio (in process).

Each timed run walks every cell with a fresh assembler (coalescing off, as the
golden replays), repeating the corpus enough times to last milliseconds; the
figure is deltas per second of the median run.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.replay.cells import GOLDEN_ENTROPY, Message
from bbridge.wire.recording import bridge_lane, find_cells

MIN_DELTAS_PER_RUN = 20_000
_message = msgspec.json.Decoder(Message)


@dataclass
class Cell:
    provider_id: str
    lines: list[bytes]  # the cell's `thread/delta` JSON-RPC lines, in wire order
    params: list[grammar.ThreadDeltaParams]  # the valid ones, decoded


def load_corpus(root: Path) -> list[Cell]:
    cells = []
    for path in find_cells(root):
        lines, params = [], []
        for entry in bridge_lane(path):
            line = entry.line.encode()
            try:
                note = _message.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if note.method != "thread/delta":
                continue
            lines.append(line)
            with contextlib.suppress(grammar.GrammarError):
                params.append(grammar.decode_params(note.params))
        cells.append(Cell(path.parent.name, lines, params))
    return cells


def _parse_validate_assemble(cells: list[Cell]) -> None:
    for cell in cells:
        assembler = Assembler(cell.provider_id, GOLDEN_ENTROPY, 500, 0)
        for line in cell.lines:
            try:
                params = grammar.decode_params(_message.decode(line).params)
            except grammar.GrammarError:
                continue
            assembler.assemble(params.threadId, params.deltas, 0)


def _decode_only(cells: list[Cell]) -> None:
    for cell in cells:
        for line in cell.lines:
            try:
                grammar.decode_params(_message.decode(line).params)
            except grammar.GrammarError:
                continue


def _assemble_only(cells: list[Cell]) -> None:
    for cell in cells:
        assembler = Assembler(cell.provider_id, GOLDEN_ENTROPY, 500, 0)
        for params in cell.params:
            assembler.assemble(params.threadId, params.deltas, 0)


def _median_rate(work: Callable[[list[Cell]], None], cells: list[Cell], deltas: int, runs: int) -> float:
    repeat = max(1, math.ceil(MIN_DELTAS_PER_RUN / max(deltas, 1)))
    work(cells)  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(repeat):
            work(cells)
        times.append(time.perf_counter() - started)
    return deltas * repeat / statistics.median(times)


def bench_core(root: Path, runs: int) -> dict[str, Any]:
    cells = load_corpus(root)
    deltas = sum(len(p.deltas) for cell in cells for p in cell.params)
    if not deltas:
        raise ValueError(f"no valid thread/delta notifications under {root}")
    return {
        "corpus": str(root),
        "cells": len(cells),
        "notifications": sum(len(cell.lines) for cell in cells),
        "deltas": deltas,
        "runs": runs,
        "deltas_per_s": round(_median_rate(_parse_validate_assemble, cells, deltas, runs)),
        "decode_only_per_s": round(_median_rate(_decode_only, cells, deltas, runs)),
        "assemble_only_per_s": round(_median_rate(_assemble_only, cells, deltas, runs)),
    }


def events_per_1000_tokens(flush_ms: float) -> int:
    """Text events for 1,000 one-token deltas arriving 1 ms apart (simulated clock), the tail flush included."""
    assembler = Assembler("bench", GOLDEN_ENTROPY, 500, flush_ms)
    key = grammar.ItemKey(providerItemId="m")
    events = assembler.assemble("t", [grammar.TurnOpen()], 0)
    for tick in range(1, 1001):
        events += assembler.assemble("t", [grammar.ItemTextDelta(key=key, channel="agentMessage", text=" x")], tick)
    events += assembler.assemble("t", [grammar.ItemTextClose(key=key, channel="agentMessage")], 1001)
    return sum(1 for event in events if event["type"] == "item/agentMessage/delta")
