"""A provider bridge on bbridge.kit that answers each prompt by shouting it back, one word at a time."""

import itertools

import trio

from bbridge.core import grammar as g
from bbridge.kit import Bridge
from bbridge.wire import protocol

bridge = Bridge("shout")
item_numbers = itertools.count(1)  # a fresh item key for every item: msg-1, msg-2, ...
live: dict[str, g.ItemKey] = {}  # thread -> the key of its live turn's message


@bridge.method("thread/start", protocol.ThreadStartParams)
async def thread_start(params: protocol.ThreadStartParams) -> dict[str, str]:
    provider_thread_id = f"shout-{params.threadId}"
    await bridge.open_session(params.threadId, provider_thread_id)  # identity + session.reset, then the answer
    return {"providerThreadId": provider_thread_id}


@bridge.method("thread/resume", protocol.ThreadResumeParams)
async def thread_resume(params: protocol.ThreadResumeParams) -> dict[str, str]:
    await bridge.open_session(params.threadId, params.providerThreadId)
    return {"providerThreadId": params.providerThreadId}


@bridge.method("turn/start", protocol.TurnStartParams)
async def turn_start(params: protocol.TurnStartParams) -> dict[str, str]:
    words = " ".join(i.text for i in params.input if isinstance(i, protocol.TextInput)).upper().split()
    key = live[params.threadId] = g.ItemKey(providerItemId=f"msg-{next(item_numbers)}")
    await bridge.emit(params.threadId, [g.InputAccepted(clientRequestId=params.clientRequestId), g.TurnOpen()])
    bridge.spawn(answer, params.threadId, key, words)
    return {}


async def answer(thread_id: str, key: g.ItemKey, words: list[str]) -> None:
    for n, word in enumerate(words):
        await trio.sleep(0.05)  # the provider thinking: a stop may land here
        if live.get(thread_id) is not key:
            return  # stopped: thread/stop settled the turn
        text = f" {word}" if n else word
        await bridge.emit(thread_id, [g.ItemTextDelta(key=key, channel="agentMessage", text=text)])
    del live[thread_id]
    close = [g.ItemTextClose(key=key, channel="agentMessage")] if words else []  # close only what was opened
    await bridge.emit(thread_id, [*close, g.TurnBoundary(status="completed")])


@bridge.method("thread/stop", protocol.ThreadStopParams)
async def thread_stop(params: protocol.ThreadStopParams) -> dict[str, str]:
    if live.pop(params.threadId, None) is not None and params.intent == "interrupt":
        await bridge.emit(params.threadId, [g.TurnBoundary(status="interrupted")])  # settle, then answer
    return {}


if __name__ == "__main__":
    bridge.run()
