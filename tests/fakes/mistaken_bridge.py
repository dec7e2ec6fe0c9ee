"""A kit bridge that makes one classic bridge-author mistake on purpose (tests/test_author.py).

Usage: python mistaken_bridge.py MISTAKE, one of:
  reuse-key        two messages in one turn under one item key: the second one's deltas reach the finished first
  close-unopened   the message is closed under a key it never streamed to (a typo): the real one stays open
  double-close     the message is closed twice
  none             no mistake
"""

import sys

from bbridge.core import grammar as g
from bbridge.kit import Bridge
from bbridge.wire import protocol

MISTAKE = sys.argv[1]
bridge = Bridge("mistaken")


@bridge.method("thread/start", protocol.ThreadStartParams)
async def thread_start(params: protocol.ThreadStartParams) -> dict[str, str]:
    await bridge.open_session(params.threadId, f"mistaken-{params.threadId}")
    return {"providerThreadId": f"mistaken-{params.threadId}"}


def message(key: str, text: str, close_as: str | None = None) -> list[g.Delta]:
    opened = g.ItemKey(providerItemId=key)
    closed = g.ItemKey(providerItemId=close_as or key)
    return [
        g.ItemTextDelta(key=opened, channel="agentMessage", text=text),
        g.ItemTextClose(key=closed, channel="agentMessage"),
    ]


@bridge.method("turn/start", protocol.TurnStartParams)
async def turn_start(params: protocol.TurnStartParams) -> dict[str, str]:
    deltas: list[g.Delta] = [g.InputAccepted(clientRequestId=params.clientRequestId), g.TurnOpen()]
    if MISTAKE == "reuse-key":
        deltas += message("msg", "first") + message("msg", "second")
    elif MISTAKE == "close-unopened":
        deltas += message("msg-1", "hello", close_as="msg1")
    elif MISTAKE == "double-close":
        deltas += [
            *message("msg-1", "hello"),
            g.ItemTextClose(key=g.ItemKey(providerItemId="msg-1"), channel="agentMessage"),
        ]
    else:
        deltas += message("msg-1", "hello")
    await bridge.emit(params.threadId, [*deltas, g.TurnBoundary(status="completed")])
    return {}


@bridge.method("thread/stop", protocol.ThreadStopParams)
async def thread_stop(params: protocol.ThreadStopParams) -> dict[str, str]:
    return {}


bridge.run()
