"""The recorded-traffic rules (protocol.md §7.4): replay committed cells' runtime lanes into the bridge.

Each cell gets a fresh bridge process, driven by the parity harness's driver
(`bbridge.replay.driver`, §6.3) with the fixture's replay bounds; the events
the client assembled, as the runtime would live, are judged here. An `acp-*`
cell's launch spec is pointed at the fake agent playing its provider lanes
(§6.2); any other bridge finds its cell through `{cell}` / `{provider}` in its
arguments or `BBRIDGE_CONFORMANCE_CELL` / `BBRIDGE_CONFORMANCE_PROVIDER`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio

from bbridge.conformance.fixture import Fixture
from bbridge.conformance.results import Result, failed, passed, skipped
from bbridge.core.events import encode_event
from bbridge.core.guard import Guard
from bbridge.replay import driver
from bbridge.replay.bridge_client import BridgeOutput
from bbridge.replay.driver import Replay
from bbridge.wire.lanes import find_cells, is_cell
from bbridge.wire.schema import ThreadEvent

CHECKS = ("replays", "events-schema-valid", "grammar", "turn-lifecycle", "not-empty")


class UsageError(ValueError):
    """`--recordings` names nothing replayable; the CLI exits 2."""


def select_cells(root: Path, names: Sequence[str]) -> list[Path]:
    """The thread-scoped conformance cells under `root` (a recordings root, a provider folder or one cell).

    Rule ids name the cell only (`recorded/<cell>/...`), so one run covers one provider.
    """
    if not root.is_dir():
        raise UsageError(f"--recordings {root}: not a directory")
    cells = [root] if is_cell(root) else [c for c in find_cells(root) if c.name in names and _thread_scoped(c)]
    if not cells:
        raise UsageError(f"--recordings {root}: no thread-scoped cell named {', '.join(names)}")
    providers = sorted({c.parent.name for c in cells})
    if len(providers) > 1:
        raise UsageError(f"--recordings {root}: cells of {', '.join(providers)}; point it at one provider's folder")
    return cells


def _thread_scoped(cell: Path) -> bool:
    manifest = cell / "manifest.json"
    if not manifest.exists():
        return True
    try:
        return bool(json.loads(manifest.read_text(encoding="utf-8")).get("scope", "thread") == "thread")
    except (OSError, json.JSONDecodeError):
        return False


def without_recordings() -> list[Result]:
    return [skipped(f"recorded/<cell>/{check}", "no --recordings DIR given") for check in CHECKS]


# -- results -------------------------------------------------------------------------


def check_replay(cell: str, replay: Replay) -> list[Result]:
    """The five `recorded/<cell>/...` results of one replay."""
    rule, plan, stalls, log = f"recorded/{cell}/", replay.plan, replay.stalls, replay.log
    events = [e for e in log if e.kind == "event"]
    results = [
        failed(rule + "replays", "; ".join(stalls)) if stalls else passed(rule + "replays", "no stalls"),
        _schema(rule + "events-schema-valid", log),
    ]
    # §7.4: the replayed events the live grammar kept, through a fresh grammar machine (never cleared)
    fresh = Guard()
    kept = [e.event for e in events if e.violation is None]
    broken = next(((event, v) for event in kept if (v := fresh.observe(event)) is not None), None)
    if broken is not None:
        event, v = broken
        results.append(failed(rule + "grammar", f"{v.rule} on {event['type']}: {v.reason}"))
    else:
        results.append(passed(rule + "grammar", "the replayed events pass a fresh grammar machine"))
    types = [event["type"] for event in kept]
    started, completed = types.count("turn/started"), types.count("turn/completed")
    counts = f"replay {started} started/{completed} completed, recording {plan.started}/{plan.completed}"
    ok = started == plan.started and completed == plan.completed and started == completed
    results.append((passed if ok else failed)(rule + "turn-lifecycle", counts))
    if plan.events and not events:
        results.append(failed(rule + "not-empty", f"the recording assembled {plan.events} events, the replay none"))
    else:
        results.append(passed(rule + "not-empty", f"replay {len(events)} events, recording {plan.events}"))
    return results


def _schema(rule: str, log: list[BridgeOutput]) -> Result:
    index = 0
    for entry in log:
        if entry.kind == "invalid-delta":
            return failed(rule, f"a thread/delta before event {index} is invalid: {entry.reason}")
        if entry.kind != "event":
            continue
        try:
            msgspec.json.decode(encode_event(entry.event), type=ThreadEvent)
        except msgspec.ValidationError as exc:
            return failed(rule, f"event {index} ({entry.event['type']}) is not a ThreadEvent: {exc}")
        index += 1
    return passed(rule, f"{index} replayed events parse as ThreadEvent")


async def replay_cell(
    command: Sequence[str], cell: Path, fixture: Fixture, limiter: trio.CapacityLimiter
) -> list[Result]:
    """The cell through the shared §6.3 driver, as the runtime assembles it live, judged by the §7.4 rules."""
    async with limiter:
        replay = await driver.replay_cell(command, cell, pacing=fixture.timeouts.replay)
    return check_replay(cell.name, replay)
