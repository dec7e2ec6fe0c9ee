"""The client methods a Perspectives room serves through the daemon (issue 48), as msgspec types: the daemon routes
them to the room (`bbridge.daemon.services`) and answers `-32601` saying what to configure when none serves them;
`bbridge.wire.openrpc` describes them and both clients call them typed.

* `ai/complete {providerId?, model?, reasoningLevel?, prompt, outputSchema, timeoutMs}` → `AiCompleteOk` or
  `AiCompleteError`: one helper inference on a hidden thread, its answer a JSON value valid against
  `outputSchema`. A failure is an answer (`ok: false` with a code a caller can act on), not a JSON-RPC error: a
  JSON-RPC error means the request itself was wrong.
* `perspectives/runs {threadId?}` → `PerspectivesRunsResult`: the runs the room knows (those called from one thread
  when it is named), each with its hidden members.

`PerspectivesStatus` is what the room reports for `daemon/status` (under `perspectives`); the listener's
`/metrics` reads its `runs` counts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core.scalars import NonEmpty, Wire
from bbridge.wire.client_api import HiddenRole

AI_COMPLETE_MIN_MS = 1_000
AI_COMPLETE_MAX_MS = 600_000
AiCompleteCode = Literal[
    "timeout", "rate_limited", "service_unavailable", "auth_required", "request_failed", "invalid_response"
]
RunTool = Literal["help", "gather_perspectives"]
RunPhase = Literal["planning", "panel", "synthesis", "delivering", "done"]
# delivered: the result reached the calling thread; failed: a `Perspectives panel failed` message did; undelivered:
# the one delivery attempt itself failed (logged, never retried)
RunOutcome = Literal["delivered", "failed", "undelivered"]
MemberStatus = Literal["running", "completed", "partial", "failed", "timed_out"]


class AiCompleteParams(Wire, kw_only=True, forbid_unknown_fields=True):
    """One helper inference: `prompt` to a model (the room's configured one when `providerId`/`model` are left out),
    answered with a JSON value valid against `outputSchema` (a JSON Schema), within `timeoutMs`."""

    providerId: NonEmpty | UnsetType = UNSET
    model: NonEmpty | UnsetType = UNSET
    reasoningLevel: NonEmpty | UnsetType = UNSET
    prompt: NonEmpty
    outputSchema: dict[str, Any]
    timeoutMs: Annotated[int, msgspec.Meta(ge=AI_COMPLETE_MIN_MS, le=AI_COMPLETE_MAX_MS)]


class AiCompleteOk(Wire, kw_only=True):
    ok: Literal[True]
    model: str  # the model that answered
    value: Any  # valid against the request's `outputSchema`


class AiCompleteError(Wire, kw_only=True):
    ok: Literal[False]
    code: AiCompleteCode
    message: str


# An `ai/complete` answer: not a msgspec union (two untagged Structs), so decoded by `ai_complete_result`.
AiCompleteResult = AiCompleteOk | AiCompleteError


def ai_complete_result(value: Any) -> AiCompleteResult:
    """An `ai/complete` answer as its type, by its `ok` member."""
    if isinstance(value, dict) and value.get("ok") is True:
        return msgspec.convert(value, AiCompleteOk)
    return msgspec.convert(value, AiCompleteError)


class PerspectivesRunsParams(Wire, kw_only=True, forbid_unknown_fields=True):
    threadId: NonEmpty | UnsetType = UNSET  # only the runs called from this thread


class RunMember(Wire, kw_only=True):
    """One hidden thread of a run."""

    role: HiddenRole
    providerId: str
    model: str
    threadId: str
    lens: str | UnsetType = UNSET  # a worker's lens
    status: MemberStatus
    usage: dict[str, Any] | UnsetType = UNSET  # its latest token usage, as its events reported it
    seconds: float | UnsetType = UNSET  # from its construction to its end (so far, while it runs)


class PerspectivesRun(Wire, kw_only=True):
    runId: str
    threadId: str  # the calling thread
    tool: RunTool
    lenses: list[str]
    phase: RunPhase
    outcome: RunOutcome | UnsetType = UNSET  # once the run has ended
    startedAt: float  # seconds since the epoch
    members: list[RunMember]


class PerspectivesRunsResult(Wire, kw_only=True):
    runs: list[PerspectivesRun]


class RunCounts(Wire, kw_only=True):
    """Runs by state: `running` now, and how those that ended ended (one key per `RunOutcome`)."""

    running: int = 0
    delivered: int = 0
    failed: int = 0
    undelivered: int = 0


class PerspectivesStatus(Wire, kw_only=True):
    """What a Perspectives room reports for `daemon/status` (`Service.report`, under `perspectives`)."""

    runs: RunCounts
