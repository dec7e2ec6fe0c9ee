"""A small bridge for the CI recipe's test (tests/test_ci_recipe.py): not an agent, no provider.

The minimal bridge of docs/writing-a-bridge.md (examples/minimal_bridge.py: sessions and stops) with a turn of its own, answered at
once and word for word deterministic: each word reversed ("hello there" -> "olleh ereht"), then the turn's end.
`--changed` alters one delta (the last word gets a "!"), the regression a replay must catch.
Usage: python tiny_bridge.py [--changed]
"""

import sys
from pathlib import Path

from bbridge.core import grammar as g
from bbridge.wire import protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from minimal_bridge import bridge  # the example is a script, not a package: imported from its folder

CHANGED = "--changed" in sys.argv[1:]
turns: dict[str, int] = {}  # thread -> turns answered: item keys stay unique within a thread


@bridge.method("turn/start", protocol.TurnStartParams)
async def turn_start(params: protocol.TurnStartParams) -> dict[str, str]:
    words = [w[::-1] for i in params.input if isinstance(i, protocol.TextInput) for w in i.text.split()]
    if CHANGED and words:
        words[-1] += "!"
    turns[params.threadId] = number = turns.get(params.threadId, 0) + 1
    key = g.ItemKey(providerItemId=f"answer-{number}")
    await bridge.emit(params.threadId, [g.InputAccepted(clientRequestId=params.clientRequestId), g.TurnOpen()])
    for n, word in enumerate(words):
        await bridge.emit(params.threadId, [g.ItemTextDelta(key=key, channel="agentMessage", text=f" {word}"[not n :])])
    close = [g.ItemTextClose(key=key, channel="agentMessage")] if words else []
    await bridge.emit(params.threadId, [*close, g.TurnBoundary(status="completed")])
    return {}


if __name__ == "__main__":
    bridge.run()
