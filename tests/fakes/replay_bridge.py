"""A fake bridge that replays a recorded cell (daemon.md §7): python replay_bridge.py CELL_DIR

The cell's merged lanes are a script: each recorded `runtime→bridge` message
is a trigger and the `bridge→runtime` lines recorded after it (until the next
trigger) are what the bridge says when the live daemon sends the matching
message (a request with the same method, or a response). Live messages that
arrive early wait for their turn. Responses are re-addressed to the live
request ids. `initialize` is answered here with every capability, since the
recorded cells predate grammar negotiation.
"""

import json
import sys
from pathlib import Path

from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, read_cell

CAPABILITIES = {
    "sessionRestore": True,
    "threadArchive": True,
    "threadRename": True,
    "threadGoalClear": True,
    "fork": "checkpoint",
    "grammarVersions": [3, 3],
}


def load_script(cell: Path) -> tuple[list[str], list[tuple[dict, list[str]]]]:
    prelude: list[str] = []
    steps: list[tuple[dict, list[str]]] = []
    for entry in read_cell(cell):
        if entry.dir == BRIDGE_TO_RUNTIME:
            (steps[-1][1] if steps else prelude).append(entry.line)
        elif entry.dir == "runtime→bridge":
            steps.append((json.loads(entry.line), []))
    return prelude, steps


def kind(message: dict) -> str:
    return message["method"] if message.get("method") else "response"


def main() -> None:
    prelude, steps = load_script(Path(sys.argv[1]))
    live_ids: dict[str, object] = {}  # recorded request id (as JSON) -> live id
    waiting: list[dict] = []

    def emit(lines: list[str], skip_response_to: object = None) -> None:
        for line in lines:
            message = json.loads(line)
            if "method" not in message and "id" in message:
                key = json.dumps(message["id"])
                if skip_response_to is not None and key == skip_response_to:
                    continue
                if key in live_ids:
                    message["id"] = live_ids.pop(key)
                    line = json.dumps(message)
            sys.stdout.write(line + "\n")
        sys.stdout.flush()

    for raw in sys.stdin:
        message = json.loads(raw)
        if message.get("method") == "initialize":
            sys.stdout.write(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"protocolVersion": 2, "capabilities": CAPABILITIES},
                    }
                )
                + "\n"
            )
            emit(prelude)
            if steps and steps[0][0].get("method") == "initialize":
                trigger, lines = steps.pop(0)
                emit(lines, skip_response_to=json.dumps(trigger["id"]))
            continue
        waiting.append(message)
        progressed = True
        while progressed and steps:
            progressed = False
            for index, live in enumerate(waiting):
                if kind(live) == kind(steps[0][0]):
                    trigger, lines = steps.pop(0)
                    waiting.pop(index)
                    if trigger.get("method") and "id" in trigger:
                        live_ids[json.dumps(trigger["id"])] = live["id"]
                    emit(lines)
                    progressed = True
                    break
        for live in list(waiting):
            if not steps and live.get("method") and "id" in live:  # beyond the script: acknowledge
                sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": live["id"], "result": {}}) + "\n")
                sys.stdout.flush()
                waiting.remove(live)


if __name__ == "__main__":
    main()
