"""Scenario steps the Claude Code and codex live tests run alike (the shapes of the recorded cells)."""

from __future__ import annotations

from typing import Any, Protocol

import trio

from tests.support import TestClient, creq

STEER_WORDS = "Stop counting; tell me the branch."


class World(Protocol):
    """A live test's world: the construction and turn requests of its provider."""

    def start(self) -> dict[str, Any]: ...

    def turn(self, ptid: str, words: str, *, n: int = 1) -> dict[str, Any]: ...


async def steer_while_a_command_runs(
    client: TestClient, world: World, thread: str, timeout: float, quiet: float
) -> str:
    """The steer cell: a turn is steered once its command runs; both inputs land in that one turn, which completes
    and stays the only one. Returns the turn's id; what the model saw is the caller's to check."""
    ptid = (await client.request("thread/start", world.start()))["providerThreadId"]
    await client.request("turn/start", world.turn(ptid, "Count slowly."))
    await client.wait_for(
        lambda: any(e["item"]["type"] == "commandExecution" for e in client.of(thread, "item/started")), timeout
    )
    turn_id: str = client.of(thread, "turn/started")[0]["scope"]["turnId"]
    steer = {**world.turn(ptid, STEER_WORDS, n=2), "expectedTurnId": turn_id}
    assert await client.request("turn/steer", steer) == {"threadId": thread}
    await client.wait_for(lambda: client.settled(thread), timeout)
    await trio.sleep(quiet)  # nothing further arrives: the steer did not open a turn of its own
    assert [e["status"] for e in client.of(thread, "turn/completed")] == ["completed"]
    accepted = client.of(thread, "turn/input/accepted")
    assert [e["clientRequestId"] for e in accepted] == [creq(1), creq(2)]
    assert {e["scope"]["turnId"] for e in accepted} == {turn_id}
    return turn_id
