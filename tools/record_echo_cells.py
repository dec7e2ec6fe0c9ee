"""Re-record the project's own cells: `python -m tools.record_echo_cells [OUT_DIR]`.

Drives the echo bridge through the daemon's record mode (the same path a real
deployment records with) and lays each scenario out as a cell,
`OUT_DIR/echo/<cell>/{runtime→bridge,bridge→runtime}.ndjson` plus a
manifest, then pins the replayed counts in `OUT_DIR/row-counts.json`. These
cells are what a fresh clone tests against without `../shared`.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from bbridge.client import client_request_id
from bbridge.daemon.config import echo_provider
from bbridge.daemon.runtime import Daemon
from bbridge.replay.cells import replay_cell
from bbridge.run import OPTIONS
from bbridge.wire.lanes import DIRECTIONS

PROVIDER = "echo"
Step = Callable[["Driver"], Awaitable[None]]


class Driver:
    """An in-process client of the daemon that knows when a thread's turn settled."""

    name = "recorder"
    transport = "in-process"

    def __init__(self, daemon: Daemon, thread_id: str) -> None:
        self.daemon = daemon
        self.thread_id = thread_id
        self.settled = 0
        self.started: list[str] = []
        self.changed = trio.Event()

    def enqueue(self, lines: list[bytes]) -> None:
        for line in lines:
            message = msgspec.json.decode(line)
            if message.get("method") != "thread/events":
                continue
            for entry in message["params"]["events"]:
                event = entry["event"]
                if event["type"] == "turn/completed":
                    self.settled += 1
                elif event["type"] == "turn/started":
                    self.started.append(event["scope"]["turnId"])
        self.changed.set()
        self.changed = trio.Event()

    async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        return msgspec.Raw(b"{}")

    async def call(self, method: str, **params: Any) -> Any:
        return await self.daemon.handle(self, method, {"providerId": PROVIDER, "threadId": self.thread_id, **params})

    async def start(self) -> None:
        await self.call("thread/start", cwd="/tmp", options={**OPTIONS, "envVars": {}})

    async def turn(self, prompt: str) -> None:
        text = [{"type": "text", "text": prompt, "mentions": []}]
        await self.call(
            "turn/start", input=text, clientRequestId=client_request_id(), options={**OPTIONS, "envVars": {}}
        )

    async def steer(self, prompt: str) -> None:
        text = [{"type": "text", "text": prompt, "mentions": []}]
        await self.call(
            "turn/steer",
            input=text,
            clientRequestId=client_request_id(),
            options={**OPTIONS, "envVars": {}},
            expectedTurnId=self.started[-1],
        )

    async def until(self, predicate: Callable[[], bool]) -> None:
        with trio.fail_after(20):
            while not predicate():
                await self.changed.wait()

    async def stop(self, intent: str) -> None:
        active = self.started[-1] if intent == "interrupt" else None
        await self.call("thread/stop", intent=intent, activeTurnId=active)


async def _plain(d: Driver) -> None:
    await d.turn("hello from the recorder")
    await d.until(lambda: d.settled == 1)


async def _deltas_all(d: Driver) -> None:
    await d.turn("deltas:all")
    await d.until(lambda: d.settled == 1)


async def _steer(d: Driver) -> None:
    await d.turn("hold count to three")
    await d.until(lambda: len(d.started) == 1)
    await d.steer("now finish")
    await d.until(lambda: d.settled == 1)


async def _interrupt(d: Driver) -> None:
    await d.turn("hold a long answer")
    await d.until(lambda: len(d.started) == 1)
    await d.stop("interrupt")


async def _failure(d: Driver) -> None:
    await d.turn("fail:quota_exceeded")
    await d.until(lambda: d.settled == 1)


SCENARIOS: dict[str, tuple[str, Step]] = {
    "plain-turn": ("One prompt echoed as streamed text, usage, completed.", _plain),
    "deltas-all": ("One turn using 24 delta kinds and all 16 item shapes (all 30 event types).", _deltas_all),
    "steer": ("A held turn steered with a prompt that finishes it.", _steer),
    "interrupt": ("A held turn interrupted by thread/stop; settled before the answer.", _interrupt),
    "failure": ("A turn ended by a settling provider.error.", _failure),
}


async def record_cell(root: Path, cell: str, step: Step) -> Path:
    thread_id = f"thr_echo_{cell.replace('-', '_')}"
    daemon = Daemon({PROVIDER: echo_provider()}, record_dir=root, text_delta_flush_ms=0)
    driver = Driver(daemon, thread_id)
    daemon.add_client(driver)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        await driver.start()
        await step(driver)
        await driver.stop("release")
        daemon.request_shutdown()
    return root / PROVIDER / thread_id


def main(argv: list[str] | None = None) -> int:
    out = Path((argv if argv is not None else sys.argv[1:] or ["recordings"])[0])
    counts_path = out / "row-counts.json"
    counts: dict[str, Any] = json.loads(counts_path.read_text()) if counts_path.exists() else {}
    with tempfile.TemporaryDirectory() as scratch:
        for cell, (description, step) in SCENARIOS.items():
            source = trio.run(record_cell, Path(scratch), cell, step)
            target = out / PROVIDER / cell
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            lines = {}
            for direction in DIRECTIONS:
                lane = source / f"{direction}.ndjson"
                if lane.exists():
                    shutil.copy(lane, target / lane.name)
                    lines[direction] = sum(1 for line in lane.read_text().split("\n") if line)
            manifest: dict[str, object] = {
                "provider": PROVIDER,
                "cell": cell,
                "threadId": source.name,
                "scope": "thread",
            }
            manifest |= {"description": description, "bridgeRuns": 1, "lines": lines}
            (target / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
            replay = replay_cell(target, PROVIDER)
            accepted = replay.accepted
            counts[f"{PROVIDER}/{cell}"] = {
                "events": len(accepted),
                "unhandled": sum(1 for e in accepted if e["type"] == "provider/unhandled"),
                "grammarDrops": len(replay.drops),
            }
            print(f"recorded {PROVIDER}/{cell}: {counts[f'{PROVIDER}/{cell}']}")
    counts_path.write_text(json.dumps(dict(sorted(counts.items())), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
