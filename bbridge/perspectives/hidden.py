"""Hidden threads driven through the daemon's client API: constructed with `hidden {runId, role}` (the daemon
lists them nowhere by default), prompted, steered, stopped and released, their text and usage followed from the
daemon's notifications.

One task (`Hidden.pump`) reads every notification of the room's connection and hands each hidden thread's events
to its `Member`: the agent's text as it streams (what a member wrote so far is evidence even when it never
finishes), its turn's end, its token usage. A hidden thread never gets the Perspectives tools (its construction
excludes them: no recursive panels), and a request one of them makes of a person is declined (`on_request`):
its work is advisory, nobody is watching it. A member's `turn/start` carries its run's trace context in `_meta`
(`Member.trace`), so the daemon traces its turn under the run's span.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import structlog
import trio

from bbridge.client import Client, DaemonError, client_request_id
from bbridge.perspectives.prompts import Status
from bbridge.perspectives.tuples import Resolved
from bbridge.wire import client_api as api

log = structlog.get_logger("bbridge.perspectives")

Role = Literal["planner", "worker", "synthesis", "expert"]
TOOLS: Final = ("help", "gather_perspectives")  # what a hidden thread is never offered
THREAD_PREFIX: Final = "thr_hidden_"


class MemberFailed(Exception):
    """A hidden thread could not be made or prompted; the message says why (no thread id in it)."""


@dataclass
class Member:
    """One hidden thread of a run: its role and lens, what it runs on, and what it has written."""

    run_id: str
    role: Role
    resolved: Resolved
    lens: str | None = None
    thread_id: str = field(default_factory=lambda: THREAD_PREFIX + secrets.token_hex(8))
    status: Status | Literal["running", "pending"] = "pending"
    spawned: bool = False  # its construction was asked for (it may exist even if the answer never came)
    provider_thread_id: str | None = None
    turn_id: str | None = None
    requests: set[str] = field(default_factory=set)  # the clientRequestIds of its turn's inputs
    text: list[str] = field(default_factory=list)  # the agent's messages: completed ones, then the open one
    open_text: dict[str, str] = field(default_factory=dict)  # item id → streamed text of an open message
    usage: dict[str, Any] | None = None
    error: str | None = None
    error_category: str | None = None  # the last `provider/error`'s `errorInfo.category` (why it failed)
    started_at: float = field(default_factory=time.monotonic)
    ended_at: float | None = None
    accepted: trio.Event = field(default_factory=trio.Event)  # its turn has an id (or it ended)
    done: trio.Event = field(default_factory=trio.Event)  # its turn ended
    trace: dict[str, str] = field(default_factory=dict)  # its run's W3C trace context, its turns' `_meta` ({}: none)

    def output(self) -> str:
        """Everything it has written: its completed messages, then what an open one has streamed so far."""
        return "\n\n".join(part for part in [*self.text, *self.open_text.values()] if part.strip())

    def seconds(self) -> float:
        return round((self.ended_at or time.monotonic()) - self.started_at, 3)

    def take(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        turn = (event.get("scope") or {}).get("turnId")
        if kind == "turn/input/accepted" and event.get("clientRequestId") in self.requests:
            self.turn_id = turn
            self.accepted.set()
        elif kind == "item/agentMessage/delta":
            item = str(event.get("itemId"))
            self.open_text[item] = self.open_text.get(item, "") + str(event.get("delta") or "")
        elif kind == "item/completed" and (event.get("item") or {}).get("type") == "agentMessage":
            item = event["item"]
            self.open_text.pop(str(item.get("id")), None)
            self.text.append(str(item.get("text") or ""))
        elif kind == "provider/error":
            category = (event.get("errorInfo") or {}).get("category")
            self.error_category = category if isinstance(category, str) else self.error_category
        elif kind == "thread/tokenUsage/updated":
            self.usage = event.get("tokenUsage")
        elif kind == "turn/completed" and turn is not None and turn == self.turn_id:
            status = event.get("status")
            if status == "completed":
                self.finish("completed")
            else:
                self.finish("failed", str((event.get("error") or {}).get("message") or f"the turn ended {status}"))

    def finish(self, status: Status, error: str | None = None) -> None:
        if self.done.is_set():
            return
        self.status, self.error, self.ended_at = status, error, time.monotonic()
        self.accepted.set()
        self.done.set()


class Hidden:
    """The room's hidden threads, on its connection to the daemon."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.members: dict[str, Member] = {}

    async def pump(self) -> None:
        """Every notification, in order: a hidden thread's events to its member; a bridge that exited ends its
        members' turns (their text so far kept)."""
        async for note in self.client.notifications():
            params = note.params
            if isinstance(params, api.ThreadEventsNotification):
                member = self.members.get(params.threadId)
                if member is not None:
                    for entry in params.events:
                        member.take(entry.event)
            elif isinstance(params, api.BridgeStatus) and params.state in ("exited", "failed"):
                for member in self.members.values():
                    if member.resolved.provider_id == params.providerId and member.status == "running":
                        member.finish("failed", f"its agent's bridge {params.state}")
        for member in self.members.values():
            member.finish("failed", "the daemon connection closed")

    async def spawn(self, member: Member, cwd: str, timeout_s: float) -> None:
        """Construct the member's hidden thread (`MemberFailed` when it cannot be, within `timeout_s`)."""
        self.members[member.thread_id] = member
        member.spawned = True
        params = {
            "providerId": member.resolved.provider_id,
            "threadId": member.thread_id,
            "cwd": cwd,
            "options": {**member.resolved.options, "tools": {"exclude": list(TOOLS)}},
            "hidden": {"runId": member.run_id, "role": member.role},
        }
        with trio.move_on_after(timeout_s) as waited:
            try:
                answer = await self.client.request("thread/start", params)
            except DaemonError as exc:
                member.finish("failed", exc.message)
                raise MemberFailed(f"{member.resolved.provider_id} could not start: {exc.message}") from None
            member.provider_thread_id = answer.get("providerThreadId") if isinstance(answer, dict) else None
        if waited.cancelled_caught:
            member.finish("failed", f"not constructed within {timeout_s:g}s")
            raise MemberFailed(f"{member.resolved.provider_id} did not start within {timeout_s:g}s")

    async def prompt(self, member: Member, text: str) -> None:
        """Start the member's turn with `text` (its end is `member.done`)."""
        request_id = client_request_id()
        member.requests.add(request_id)
        member.status = "running"
        turn = {
            "threadId": member.thread_id,
            "input": [{"type": "text", "text": text, "mentions": []}],
            "clientRequestId": request_id,
            "options": member.resolved.options,
            **({"_meta": member.trace} if member.trace else {}),
        }
        try:
            await self.client.request("turn/start", turn)
        except DaemonError as exc:
            member.finish("failed", exc.message)
            raise MemberFailed(f"{member.resolved.provider_id} refused the prompt: {exc.message}") from None

    async def steer(self, member: Member, text: str) -> bool:
        """Steer the member's open turn with `text` (False: it had none, or the agent refused)."""
        if member.turn_id is None or member.done.is_set():
            return False
        request_id = client_request_id()
        member.requests.add(request_id)
        steer = {
            "threadId": member.thread_id,
            "expectedTurnId": member.turn_id,
            "input": [{"type": "text", "text": text, "mentions": []}],
            "clientRequestId": request_id,
            "options": member.resolved.options,
        }
        try:
            await self.client.request("turn/steer", steer)
        except DaemonError as exc:
            log.info("a hidden thread's steer was refused", thread=member.thread_id, error=exc.message)
            return False
        return True

    async def interrupt(self, member: Member, status: Status) -> None:
        """End the member's turn now (the phase is over): what it wrote stays its evidence, as `status`."""
        if member.done.is_set():
            return
        member.finish(status)
        if member.turn_id is None:
            return
        stop = {"threadId": member.thread_id, "intent": "interrupt", "activeTurnId": member.turn_id}
        with trio.move_on_after(10):
            try:
                await self.client.request("thread/stop", stop)
            except DaemonError as exc:
                log.info("a hidden thread's interrupt was refused", thread=member.thread_id, error=exc.message)

    async def release(self, member: Member) -> None:
        """Let the member's thread go (its journal stays); best effort, bounded."""
        self.members.pop(member.thread_id, None)
        if not member.spawned:
            return
        with trio.move_on_after(10):
            try:
                # `activeTurnId` goes to the bridge as sent: its protocol requires the member (null: no turn)
                release = {"threadId": member.thread_id, "intent": "release", "activeTurnId": None}
                await self.client.request("thread/stop", release)
            except DaemonError as exc:
                log.info("a hidden thread's release was refused", thread=member.thread_id, error=exc.message)

    async def answer(self, member: Member, text: str, timeout_s: float) -> str:
        """Prompt and wait for the turn's end (`timeout_s`: then interrupted, `timed_out`); its output."""
        await self.prompt(member, text)
        with trio.move_on_after(timeout_s):
            await member.done.wait()
        if not member.done.is_set():
            await self.interrupt(member, "timed_out")
        return member.output()
