"""`bbridge conformance`: prove a provider bridge against the rules of protocol.md §7.

Every rule id of §7.3 (scripted), §7.4 (recorded traffic, with `--recordings`),
§7.5 (the host-side live grammar over the assembled stream) and §7.6 (the rules
bbridge adds) yields one line `PASS|FAIL|SKIP <rule-id> — <reason>`, in a fixed
order whatever ran concurrently; the last line is `N passed, M failed` (skips
are not counted). Independent groups run on their own bridge processes in
parallel; every wait is bounded by the fixture, and each process group is
stopped at the end, so a hung bridge costs time and FAIL lines, never a hang.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import trio

from bbridge.conformance import assembled, recorded, scripted
from bbridge.conformance.fixture import Fixture, FixtureError, load_fixture
from bbridge.conformance.recorded import UsageError
from bbridge.conformance.results import Result, junit_case, summary
from bbridge.replay import junit
from bbridge.replay.bridge_client import BridgeClient, with_client

__all__ = ["FixtureError", "Result", "UsageError", "load_fixture", "main", "run_conformance"]

T = TypeVar("T")


async def run_conformance(command: Sequence[str], fixture: Fixture, recordings: Path | None = None) -> list[Result]:
    """All results in report order; raises `UsageError` before spawning anything when the input is unusable."""
    if not command or not all(command):
        raise UsageError(f"the bridge command must be non-empty words, not {list(command)!r}")
    if shutil.which(command[0]) is None:
        raise UsageError(f"cannot run the bridge command: {command[0]!r} not found")
    cells = recorded.select_cells(recordings, fixture.recorded_cells) if recordings is not None else []
    creq = scripted.RequestIds()  # one counter per run, as the kit's is per process
    clients: dict[str, BridgeClient] = {}
    results: dict[str, Result] = {}
    replays: dict[Path, list[Result]] = {}
    limiter = trio.CapacityLimiter(fixture.concurrency)
    with tempfile.TemporaryDirectory(prefix="bbridge-conformance-") as scratch:
        cwd = fixture.cwd or scratch

        async def group(name: str, body: Callable[[scripted.Run], Awaitable[T]]) -> T:
            async def on_client(client: BridgeClient) -> T:
                clients[name] = client
                return await body(scripted.Run(client, fixture, cwd, creq))

            return await with_client(command, on_client)

        async def main_group() -> None:
            results.update(await group("main", scripted.main_group))

        async def added_group(rule: str, body: Callable[[scripted.Run], Awaitable[Result]]) -> None:
            results[rule] = await group(rule, body)

        async def replay(cell: Path) -> None:
            replays[cell] = await recorded.replay_cell(command, cell, fixture, limiter)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(main_group)
            nursery.start_soon(added_group, scripted.INTERRUPT, scripted.interrupt_group)
            nursery.start_soon(added_group, scripted.SKILLS, scripted.skills_group)
            for cell in cells:
                nursery.start_soon(replay, cell)

    scripted_clients = [clients[name] for name in ("main", scripted.INTERRUPT) if name in clients]
    results.setdefault(assembled.SCHEMA, assembled.schema_result(scripted_clients))
    results.update((r.rule, r) for r in assembled.grammar_results(scripted_clients))
    results.update((r.rule, r) for r in assembled.suspect_results(scripted_clients))
    results[assembled.ICONS] = assembled.icon_result(fixture, scripted_clients)
    ordered = [results[rule] for rule in scripted.RULES]
    if recordings is None:
        return ordered + recorded.without_recordings()
    return ordered + [r for cell in cells for r in replays[cell]]


def main(
    command: Sequence[str],
    fixture_path: Path | None,
    recordings: Path | None,
    wait_ms: int | None = None,
    *,
    junit_path: Path | None = None,
) -> int:
    """The CLI: print the report (and with `junit_path` write it as JUnit XML; on GitHub Actions annotate each
    failure); 0 when nothing failed, 1 on a failure, 2 on a usage error."""
    started, clock = datetime.now(UTC), time.monotonic()
    try:
        fixture = load_fixture(fixture_path)
        if wait_ms is not None:  # real agents take longer than the kit's 5 s per wait
            fixture = dataclasses.replace(fixture, timeouts=dataclasses.replace(fixture.timeouts, wait=wait_ms / 1000))
        results = trio.run(run_conformance, command, fixture, recordings)
    except (FixtureError, UsageError) as exc:
        print(f"bbridge conformance: {exc}", file=sys.stderr)
        return 2
    for result in results:
        print(result.line())
    cases = [junit_case(result) for result in results]
    junit.annotate(cases)
    if junit_path is not None:
        junit.write(junit_path, "bbridge conformance", cases, time.monotonic() - clock, started)
    passed, failed = summary(results)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
