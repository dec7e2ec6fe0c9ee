"""What the Claude Code and codex live tests send and run alike: the recorded cells' request shapes and scenario
steps."""

from __future__ import annotations

from typing import Any, Protocol

import trio

from tests.support import FULL, TestClient, creq

STEER_WORDS = "Stop counting; tell me the branch."


def recorded_options(
    model: str, instructions: str, policy: dict[str, Any], provider_options: dict[str, Any]
) -> dict[str, Any]:
    """A construction's or turn's `options` in the recorded cells' shape (the policy, FULL or ASK, in its place)."""
    return {
        "model": model,
        "serviceTier": "default",
        "reasoningLevel": "medium",
        "instructions": instructions,
        "envVars": {},
        **policy,
        "providerOptions": provider_options,
    }


def turn_request(
    provider: str, thread: str, ptid: str, words: str, options: dict[str, Any], n: int = 1
) -> dict[str, Any]:
    """A `turn/start` (or, with `expectedTurnId`, a `turn/steer`) of one text input, the `n`th client request."""
    return {
        "providerId": provider,
        "threadId": thread,
        "providerThreadId": ptid,
        "input": [{"type": "text", "text": words, "mentions": []}],
        "clientRequestId": creq(n),
        "options": options,
    }


def approve(decision: str) -> Any:
    """The client's answer to every `interaction/request`, as the approval cells' runtime answered."""
    answer = {"decision": decision} if decision == "deny" else {"decision": decision, "grantedPermissions": None}
    return lambda request: answer


def interrupt(client: TestClient, provider: str, thread: str, ptid: str) -> dict[str, Any]:
    """The `thread/stop` that interrupts the thread's first turn (the stop-interrupt cell's)."""
    turn_id = client.of(thread, "turn/started")[0]["scope"]["turnId"]
    return {
        "providerId": provider,
        "threadId": thread,
        "providerThreadId": ptid,
        "intent": "interrupt",
        "activeTurnId": turn_id,
    }


class World(Protocol):
    """A live test's world: the construction and turn requests of its provider."""

    def start(self, policy: dict[str, Any] = ...) -> dict[str, Any]: ...

    def turn(self, ptid: str, words: str, policy: dict[str, Any] = ..., n: int = 1) -> dict[str, Any]: ...


async def first_turn(
    client: TestClient, world: World, thread: str, words: str, timeout: float, policy: dict[str, Any] = FULL
) -> str:
    """A thread started and its first turn run to its settlement; the provider thread id."""
    ptid: str = (await client.request("thread/start", world.start(policy)))["providerThreadId"]
    await client.request("turn/start", world.turn(ptid, words, policy))
    await client.wait_for(lambda: client.settled(thread), timeout)
    return ptid


async def resumed_turn(client: TestClient, world: World, thread: str, ptid: str, words: str, timeout: float) -> None:
    """The resume cell on a fresh daemon: the session resumes restorable, and a second turn runs to its end."""
    resumed = await client.request("thread/resume", {**world.start(), "providerThreadId": ptid})
    assert resumed == {"providerThreadId": ptid, "sessionRestorable": True}
    await client.request("turn/start", world.turn(ptid, words, n=2))
    await client.wait_for(lambda: client.settled(thread), timeout)


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
