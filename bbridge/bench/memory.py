"""Resident memory the daemon's per-thread state costs (run in a fresh subprocess per figure).

Usage: python -m bbridge.bench.memory idle|open THREADS

`idle`: every thread runs one short turn (open, a streamed answer, usage,
boundary); `open`: every thread holds an open turn and a streaming agent
message. Notifications go through `Daemon.on_notifications` exactly as a
bridge's would (assembler, guard, tracker, watchdogs, in-memory journal,
daemon defaults: text coalescing on), with no client attached. Prints the
growth of resident memory (`/proc/self/statm`) in MiB after a collection.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

import msgspec
import trio

from bbridge.bench import stream
from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.wire import rpc

WARM_UP_THREADS = 50


def resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _thread_deltas(kind: str, n: int) -> list[dict[str, Any]]:
    deltas = stream.short_turn(f"{n}")
    return deltas if kind == "idle" else deltas[: stream.SHORT_TURN_OPEN]


async def _run(kind: str, threads: int) -> float:
    daemon = Daemon({"bench": ProviderConfig(command=["bench"])})
    bridge = BridgeProcess("bench", daemon.providers["bench"], daemon.supervisor)

    async def feed(first: int, count: int) -> None:
        for n in range(first, first + count):
            params = {"threadId": f"thr_{n}", "deltas": _thread_deltas(kind, n)}
            note = rpc.Notification("thread/delta", msgspec.Raw(msgspec.json.encode(params)))
            await daemon.output.on_notifications(bridge, [note])

    await feed(0, WARM_UP_THREADS)
    gc.collect()
    before = resident_bytes()
    await feed(WARM_UP_THREADS, threads)
    gc.collect()
    return (resident_bytes() - before) / 2**20


def main() -> None:
    kind, threads = sys.argv[1], int(sys.argv[2])
    print(json.dumps({"mb": round(trio.run(_run, kind, threads), 1)}))


if __name__ == "__main__":
    main()
