"""Pending bridge requests as thread state (issue 23): approvals, questions and client tool calls.

Every `interaction/request` and every relayed `item/tool/call` gets a daemon-minted `requestId` and is held
here until it is resolved, exactly once:

* by a client: the relayed daemon → client request's answer (the client it was relayed to), or
  `interaction/respond {requestId, result | error}` from any client — the first answer wins, a later one is
  refused naming who answered first;
* by the daemon's policy, when nobody can answer: no client connected for the provider's
  `interaction_timeout_s`, a `thread/stop` of its thread, or the bridge's exit. The policy answer is a valid
  bridge-protocol response for the payload kind (protocol.md §3.7): an approval is declined
  (`{"decision":"deny"}`), a question is cancelled (an error answer, which bridges read as a cancellation),
  a tool call fails with a result the model can read.

A client that disconnects resolves nothing: its requests stay pending for the next client. Every connected
client is told when a request opens (`interaction/opened`) and when it is resolved (`interaction/resolved`,
with who or what resolved it: the connection's name and the `client` it named in `initialize`, or the daemon's
policy); `thread/pending` lists what is open. The history of each thread's resolutions
is kept (bounded) and, with `--journal`, appended to `<thread>.interactions.ndjson` beside its events.

`Interactions` holds every open request by its `requestId` (answers name it); a request of a thread is also in
that thread's record (`ThreadRecord.pending`) while it is open, which answers the per-thread questions (what a
thread waits on, the oldest, how many). A request that names no thread is in no record.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog
import trio

from bbridge.daemon.journal import append_record, beside, read_records
from bbridge.wire import errors, rpc

log = structlog.get_logger("bbridge.daemon.pending")

HISTORY_BOUND = 200
TOOL_CALL = "item/tool/call"
INTERACTION = "interaction/request"


@dataclass(eq=False)
class Pending:
    """One open bridge request and, once resolved, how."""

    request_id: str
    method: str
    kind: str  # approval | user_question | tool_call | the payload's own kind
    provider_id: str
    thread_id: str | None
    params: dict[str, Any]
    opened_at: float  # wall clock, for clients
    opened: float  # trio clock, for ages and deadlines
    done: trio.Event = field(default_factory=trio.Event)
    result: msgspec.Raw | None = None
    error: rpc.RpcError | None = None
    resolved_by: str | None = None
    resolved_client: dict[str, str] | None = None  # the answering client's initialize `client` {name, version}
    resolved_at: float | None = None

    def view(self, now: float) -> dict[str, Any]:
        """As `thread/pending` and `daemon/status` show it."""
        return {
            "requestId": self.request_id,
            "threadId": self.thread_id,
            "providerId": self.provider_id,
            "method": self.method,
            "kind": self.kind,
            "params": self.params,
            "openedAt": self.opened_at,
            "ageS": round(now - self.opened, 3),
        }

    def resolution(self) -> dict[str, Any]:
        """`interaction/resolved` params (and the history record)."""
        record: dict[str, Any] = {
            "requestId": self.request_id,
            "threadId": self.thread_id,
            "providerId": self.provider_id,
            "method": self.method,
            "kind": self.kind,
            "openedAt": self.opened_at,
            "resolvedAt": self.resolved_at,
            "resolvedBy": self.resolved_by,
        }
        if self.error is not None:
            record["error"] = {"code": self.error.code, "message": self.error.message}
        else:
            record["result"] = msgspec.json.decode(self.result or b"null")
        if self.resolved_client is not None:
            record["client"] = self.resolved_client
        return record


def payload_kind(method: str, params: dict[str, Any]) -> str:
    if method == TOOL_CALL:
        return "tool_call"
    payload = params.get("payload")
    kind = payload.get("kind") if isinstance(payload, dict) else None
    return kind if isinstance(kind, str) else "unknown"


def policy_answer(pending: Pending, reason: str) -> tuple[msgspec.Raw | None, rpc.RpcError | None]:
    """The answer nobody gave: a declined approval, a cancelled question, a failed tool call (with `reason`)."""
    if pending.kind == "approval":
        return msgspec.Raw(b'{"decision":"deny"}'), None
    if pending.kind == "tool_call":
        text = f'Tool "{pending.params.get("tool")}" was not answered: {reason}'
        body = {"success": False, "contentItems": [{"type": "inputText", "text": text}]}
        return msgspec.Raw(msgspec.json.encode(body)), None
    return None, rpc.RpcError(rpc.BRIDGE_ERROR, f"The {pending.kind.replace('_', ' ')} was cancelled: {reason}")


class Holder(Protocol):
    """A thread's record as the pending requests use it (`threads.ThreadRecord`): its open ones by request id."""

    @property
    def pending(self) -> dict[str, Pending]: ...


class Holders(Protocol):
    """The thread records (`threads.ThreadRegistry`): a thread's, made on first use; dropped once it holds
    nothing (a thread no client constructed)."""

    def record(self, thread_id: str) -> Holder: ...

    def get(self, thread_id: str) -> Holder | None: ...

    def drop_if_empty(self, thread_id: str) -> None: ...

    def waiting(self, thread_id: str) -> list[Pending]: ...


class Interactions:
    """The open requests of every thread, their resolution, and the history of how each was resolved."""

    def __init__(
        self, broadcast: Callable[[list[bytes]], Any], threads: Holders, directory: Path | None = None
    ) -> None:
        self._broadcast = broadcast
        self._threads = threads
        self._directory = directory
        self._ids = itertools.count(1)
        self._entropy = f"{int(time.time() * 1000):x}"
        self.open: dict[str, Pending] = {}
        self.history: dict[str, deque[dict[str, Any]]] = {}
        self.resolved: dict[str, str] = {}  # requestId → who resolved it (bounded with the history)
        self.opened_count = 0
        self.resolved_count = 0

    def add(self, method: str, provider_id: str, params: dict[str, Any], thread_id: str | None = None) -> Pending:
        """Open a request of `thread_id` (default: the params' `threadId`); its `requestId` joins the params."""
        if thread_id is None and isinstance(params.get("threadId"), str):
            thread_id = params["threadId"]
        request_id = f"req_{self._entropy}_{next(self._ids)}"
        params["requestId"] = request_id
        pending = Pending(
            request_id,
            method,
            payload_kind(method, params),
            provider_id,
            thread_id,
            params,
            time.time(),
            trio.current_time(),
        )
        self.open[request_id] = pending
        if thread_id is not None:
            self._threads.record(thread_id).pending[request_id] = pending
        self.opened_count += 1
        view = {k: v for k, v in pending.view(pending.opened).items() if k != "ageS"}
        self._broadcast([rpc.encode_notification("interaction/opened", view)])
        return pending

    def resolve(
        self,
        request_id: str,
        by: str,
        result: msgspec.Raw | None = None,
        error: rpc.RpcError | None = None,
        client: dict[str, str] | None = None,
    ) -> Pending:
        """Resolve an open request (first answer wins); `RpcError` naming who answered first otherwise. `client`:
        what the answering client called itself in `initialize`, kept in the record beside its connection's name."""
        pending = self.open.pop(request_id, None)
        if pending is None:
            first = self.resolved.get(request_id)
            if first is not None:
                raise rpc.RpcError(
                    errors.ALREADY_RESOLVED,
                    f"Request {request_id!r} was already resolved by {first}; your answer was not used",
                )
            raise rpc.RpcError(errors.UNKNOWN_REQUEST, f"No pending request {request_id!r} (see thread/pending)")
        if pending.thread_id is not None and (thread := self._threads.get(pending.thread_id)) is not None:
            thread.pending.pop(request_id, None)
            self._threads.drop_if_empty(pending.thread_id)
        pending.result, pending.error = (result if result is not None else msgspec.Raw(b"null")), error
        pending.resolved_by, pending.resolved_at, pending.resolved_client = by, time.time(), client
        pending.done.set()
        self.resolved_count += 1
        record = pending.resolution()
        self._remember(pending, record)
        self._broadcast([rpc.encode_notification("interaction/resolved", record)])
        return pending

    def apply_policy(self, pending: Pending, reason: str, by: str) -> None:
        if pending.request_id in self.open:
            result, error = policy_answer(pending, reason)
            self.resolve(pending.request_id, by, result, error)

    def of_provider(self, provider_id: str) -> list[Pending]:
        return [p for p in self.open.values() if p.provider_id == provider_id]

    def listing(self, thread_id: str | None) -> dict[str, Any]:
        """`thread/pending`: what is open (one thread's, or all), and the thread's recent resolutions."""
        now = trio.current_time()
        asked = self.open.values() if thread_id is None else self._threads.waiting(thread_id)
        open_ = [p.view(now) for p in asked]
        result: dict[str, Any] = {"pending": open_}
        if thread_id is not None:
            result["resolved"] = list(self._history(thread_id))
        return result

    # -- history ------------------------------------------------------------------------------------------

    def _remember(self, pending: Pending, record: dict[str, Any]) -> None:
        key = pending.thread_id or ""
        history = self._history(key)
        history.append(record)
        self.resolved[pending.request_id] = str(pending.resolved_by)
        while len(self.resolved) > HISTORY_BOUND * 8:
            self.resolved.pop(next(iter(self.resolved)))
        if self._directory is not None and pending.thread_id is not None:
            try:
                append_record(beside(self._directory, pending.thread_id, "interactions"), record)
            except OSError as exc:
                log.warning("could not journal an interaction", threadId=pending.thread_id, error=str(exc))

    def _history(self, thread_id: str) -> deque[dict[str, Any]]:
        history = self.history.get(thread_id)
        if history is None:
            history = self.history[thread_id] = deque(self._load(thread_id), maxlen=HISTORY_BOUND)
        return history

    def _load(self, thread_id: str) -> list[dict[str, Any]]:
        """A thread's journaled resolutions (a daemon restart keeps them)."""
        if self._directory is None or not thread_id:
            return []
        return read_records(beside(self._directory, thread_id, "interactions"), HISTORY_BOUND)
