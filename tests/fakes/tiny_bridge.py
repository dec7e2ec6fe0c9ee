"""A small bridge on bbridge.kit for the CI recipe's test (tests/test_ci_recipe.py): not an agent, no provider.

Each prompt is answered word by word, reversed ("hello there" -> "olleh ereht"), then a usage report and the
turn's end. `--changed` alters one delta (the last word gets a "!"), the regression a replay must catch.
Usage: python tiny_bridge.py [--changed]
"""

import sys

from bbridge.core import grammar as g
from bbridge.kit import Bridge
from bbridge.wire import protocol

CHANGED = "--changed" in sys.argv[1:]
bridge = Bridge("tiny")
turns: dict[str, int] = {}  # thread -> turns answered: item keys stay unique within a thread


@bridge.method("thread/start", protocol.ThreadStartParams)
async def thread_start(params: protocol.ThreadStartParams) -> dict[str, str]:
    provider_thread_id = f"tiny-{params.threadId}"
    await bridge.open_session(params.threadId, provider_thread_id)
    return {"providerThreadId": provider_thread_id}


@bridge.method("thread/resume", protocol.ThreadResumeParams)
async def thread_resume(params: protocol.ThreadResumeParams) -> dict[str, str]:
    await bridge.open_session(params.threadId, params.providerThreadId)
    return {"providerThreadId": params.providerThreadId}


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


@bridge.method("thread/stop", protocol.ThreadStopParams)
async def thread_stop(params: protocol.ThreadStopParams) -> dict[str, str]:
    return {}


if __name__ == "__main__":
    bridge.run()
