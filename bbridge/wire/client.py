"""The daemon's own client API for pending bridge requests (README "Talking to the daemon"): what a client
sends and is sent about approvals, questions and tool calls that wait on an answer.

* `thread/pending {threadId?}` → `{pending: [PendingRequest], resolved?: [Resolution]}` (a thread's recent
  resolutions when a thread is named);
* `interaction/respond {requestId, result | error}` → `{ok: true}`; a request already resolved is refused
  (-32020, naming who answered first), an unknown one too (-32021);
* notifications to every client: `interaction/opened` (a `PendingRequest` without `ageS`) and
  `interaction/resolved` (a `Resolution`).

These Structs are what the daemon decodes `interaction/respond` with and what `bbridge schema` exports.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core.grammar import NonEmpty, Wire

RequestMethod = Literal["interaction/request", "item/tool/call"]


class ErrorBody(Wire, kw_only=True):
    code: int
    message: str


class ThreadPendingParams(Wire, kw_only=True, forbid_unknown_fields=True):
    threadId: NonEmpty | UnsetType = UNSET


class InteractionOpenedParams(Wire, kw_only=True):
    """A bridge request opened: the params are what the bridge sent (`requestId` and `providerId` added)."""

    requestId: NonEmpty
    threadId: str | None
    providerId: NonEmpty
    method: RequestMethod
    kind: str  # approval | user_question | tool_call | another payload kind
    params: dict[str, Any]
    openedAt: float  # seconds since the epoch


class PendingRequest(InteractionOpenedParams, kw_only=True):
    ageS: float


class Resolution(Wire, kw_only=True):
    """How a request was resolved: by a client (its name) or by the daemon (`daemon:timeout`,
    `daemon:thread-stop`, `daemon:bridge-exit`); exactly one of `result` and `error`."""

    requestId: NonEmpty
    threadId: str | None
    providerId: NonEmpty
    method: RequestMethod
    kind: str
    openedAt: float
    resolvedAt: float
    resolvedBy: NonEmpty
    result: Any | UnsetType = UNSET
    error: ErrorBody | UnsetType = UNSET


class ThreadPendingResult(Wire, kw_only=True):
    pending: list[PendingRequest]
    resolved: list[Resolution] | UnsetType = UNSET


class InteractionRespondParams(Wire, kw_only=True, forbid_unknown_fields=True):
    requestId: NonEmpty
    result: msgspec.Raw | UnsetType = UNSET
    error: ErrorBody | UnsetType = UNSET


class InteractionRespondResult(Wire, kw_only=True):
    ok: Literal[True]


CLIENT_TYPES = (
    ThreadPendingParams,
    ThreadPendingResult,
    InteractionRespondParams,
    InteractionRespondResult,
    InteractionOpenedParams,
    Resolution,
)
