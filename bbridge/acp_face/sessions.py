"""One ACP session: the bb thread behind it, what it runs on, and the prompt running in it.

A session is a thread id minted at `session/new`; its thread is constructed (`thread/start`, or `thread/resume`
for a loaded session the daemon no longer runs) by the first prompt, so the provider can still change until then.
A prompt is a `turn/start` whose `clientRequestId` the session waits for in `turn/input/accepted`, which names
the turn; the turn's `turn/completed` answers the prompt. A prompt that arrives while one runs is a steer of the
running turn (`turn/steer`) and is answered with the same stop reason when that turn ends.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from bbridge.acp_face.options import Choice
from bbridge.acp_face.updates import Updates, failure_message, stop_reason
from bbridge.wire import client_api as api

THREAD_PREFIX: Final = "thr_acp_"
TITLE_MAX: Final = 80
# the permission modes a session may run in (`mode` option), as bb execution options (docs/api.md)
MODES: Final[dict[str, dict[str, Any]]] = {
    "accept-edits": {"permissionMode": "accept-edits", "permissionScope": "workspace", "approvalReviewer": "user",
                     "permissionEscalation": "ask"},
    "auto": {"permissionMode": "auto", "permissionScope": "workspace", "approvalReviewer": "automatic",
             "permissionEscalation": "ask"},
    "full": {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None,
             "permissionEscalation": None},
}  # fmt: skip
DEFAULT_MODE: Final = "accept-edits"


def new_thread_id() -> str:
    return THREAD_PREFIX + secrets.token_hex(8)


@dataclass
class Prompt:
    """A prompt waiting on its turn: the `clientRequestId`s it sent, the turn once accepted, and its answer."""

    requests: set[str]
    turn_id: str | None = None
    cancelled: bool = False
    stop: str | None = None
    failure: str | None = None
    accepted: trio.Event = field(default_factory=trio.Event)  # the turn is known (or the prompt ended)
    done: trio.Event = field(default_factory=trio.Event)

    def accept(self, turn_id: str | None) -> None:
        if self.turn_id is None and turn_id is not None:
            self.turn_id = turn_id
            self.accepted.set()

    def end(self, event: dict[str, Any]) -> None:
        reason = stop_reason(event)
        if self.cancelled:
            reason = "cancelled"  # ACP: a cancelled prompt answers `cancelled`, whatever the turn did
        self.stop = reason
        if reason is None:
            self.failure = failure_message(event)
        self.accepted.set()
        self.done.set()

    def lose(self, why: str) -> None:
        """The daemon went away or refused: the prompt fails with why."""
        self.failure = why
        self.accepted.set()
        self.done.set()


@dataclass
class Session:
    session_id: str
    cwd: str
    choice: Choice
    mode: str = DEFAULT_MODE
    provider_thread_id: str | None = None
    constructed: bool = False  # the daemon runs the thread (started, resumed, or already live)
    prompted: bool = False  # a turn ran on it: the provider is fixed
    title: str | None = None
    updated_at: float = field(default_factory=time.time)
    last_seq: int = 0
    held: list[api.Entry] | None = None  # live entries held while the journal is replayed
    updates: Updates = field(default_factory=Updates)
    prompt: Prompt | None = None
    mine: set[str] = field(default_factory=set)  # the `clientRequestId`s this face sent (the others' are shown)
    servers: list[dict[str, Any]] = field(default_factory=list)  # the editor's MCP servers, as `options.tools` has them

    def options(self) -> dict[str, Any]:
        """The bb execution options of this session's next construction or turn."""
        return {**MODES[self.mode], **self.choice.turn_options(), "envVars": {}}

    def take(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The session updates one of its thread's events becomes, and the prompt it settles."""
        kind = event.get("type")
        prompt = self.prompt
        if prompt is not None:
            if kind == "turn/input/accepted" and event.get("clientRequestId") in prompt.requests:
                prompt.accept((event.get("scope") or {}).get("turnId"))
            elif kind == "turn/completed" and prompt.turn_id == (event.get("scope") or {}).get("turnId"):
                self.prompt = None
                prompt.end(event)
        if kind == "thread/identity" and event.get("providerThreadId"):
            self.provider_thread_id = event["providerThreadId"]
        if kind == "thread/name/updated" and event.get("threadName"):
            self.title = str(event["threadName"])
            return [{"sessionUpdate": "session_info_update", "title": self.title}]
        return self.updates.take(event)

    def name_from(self, text: str) -> None:
        """A title from the first prompt's text, until the agent names the thread."""
        if self.title is None and text.strip():
            line = text.strip().splitlines()[0]
            self.title = line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1] + "…"
