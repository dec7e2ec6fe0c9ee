"""Real recorded traffic through the live daemon (daemon.md §7).

For every shared cell a fake bridge subprocess replays the cell's recorded
`bridge→runtime` lines in answer to the recorded `runtime→bridge` requests,
which a socket client sends to the daemon. The client must receive the golden
events (stamped; compared unstamped) minus the guard's drops.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.core.events import encode_event
from bbridge.daemon.config import ExtensionKind, ProviderConfig, echo_provider
from bbridge.replay.cells import replay_cell
from bbridge.wire import rpc
from bbridge.wire.lanes import RUNTIME_TO_BRIDGE, find_cells, read_cell
from tests.conftest import missing_reason, shared_path
from tests.support import connect, running

REPLAY = Path(__file__).parent / "fakes" / "replay_bridge.py"
RECORDINGS = shared_path("recordings")
CELLS = [cell.relative_to(RECORDINGS).as_posix() for cell in find_cells(RECORDINGS)] if RECORDINGS else []
OWN = Path(__file__).resolve().parent.parent / "recordings"
OWN_CELLS = [cell.relative_to(OWN).as_posix() for cell in find_cells(OWN)]


def _unstamped(event: dict[str, Any]) -> dict[str, Any]:
    event["threadId"] = ""
    if "providerThreadId" in event and event["type"] != "thread/identity":
        event["providerThreadId"] = ""
    return event


def _expected(golden: Path) -> list[str]:
    lines = [line for line in (golden / "raw-events.ndjson").read_text(encoding="utf-8").split("\n") if line]
    dropped = {drop["index"] for drop in json.loads((golden / "grammar-drops.json").read_text(encoding="utf-8"))}
    return [line for index, line in enumerate(lines) if index not in dropped]


@pytest.mark.skipif(not CELLS, reason=missing_reason("recordings"))
@pytest.mark.parametrize("name", CELLS)
async def test_recorded_cell_through_the_live_daemon(tmp_path: Path, name: str) -> None:
    golden = shared_path("golden", name)
    if golden is None:
        pytest.skip(missing_reason("golden", name))
    await _through_daemon(tmp_path, RECORDINGS / name, _expected(golden))  # type: ignore[operator]


@pytest.mark.parametrize("name", OWN_CELLS)
async def test_own_cell_through_the_live_daemon(tmp_path: Path, name: str) -> None:
    """No reference golden here: the in-process replay of the same lane is the expectation."""
    cell = OWN / name
    replay = replay_cell(cell, cell.parent.name)
    expected = [encode_event(event).decode() for event in replay.accepted]
    await _through_daemon(tmp_path, cell, expected)


async def _through_daemon(tmp_path: Path, cell: Path, expected: list[str]) -> None:
    provider_id = cell.parent.name
    config = ProviderConfig(
        command=[sys.executable, str(REPLAY), str(cell)],
        extension_kinds={"provider-codex/goal": ExtensionKind(item={}, state={}), **echo_provider().extension_kinds},
    )
    requests = [
        json.loads(entry.line)
        for entry in read_cell(cell)
        if entry.dir == RUNTIME_TO_BRIDGE and '"method"' in entry.line
    ]
    async with running(tmp_path, {provider_id: config}, entropy_prefix="da00000000") as (daemon, path):
        async with connect(path, answer=lambda request: {}) as client:

            async def send(message: dict[str, Any]) -> None:
                if message["method"] == "initialize":
                    return
                params = {**message.get("params", {}), "providerId": provider_id}
                try:
                    await client.request(message["method"], params)
                except rpc.RpcError as exc:
                    assert exc.code > -32010 or exc.code < -32099, f"daemon refused {message['method']}: {exc.message}"

            async with trio.open_nursery() as nursery:
                for message in requests:
                    nursery.start_soon(send, message)
                    await trio.sleep(0.02)

            def received() -> list[str]:
                events = [event for entries in client.entries.values() for event in (e["event"] for e in entries)]
                return [json.dumps(_unstamped(dict(e)), ensure_ascii=False, separators=(",", ":")) for e in events]

            await client.wait_for(lambda: len(received()) >= len(expected), timeout=20)
            assert received() == expected
