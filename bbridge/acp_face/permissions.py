"""Pending approvals and questions of a session's thread, asked of the editor with `session/request_permission`.

Every client hears `interaction/opened`; for a session's thread this face asks the editor and answers with
`interaction/respond`, so the first answer wins wherever it comes from. When another client (the page, a second
editor, `bbridge respond`) or the daemon's policy resolves it first (`interaction/resolved`), the editor's request
is cancelled as ACP's `$/cancel_request` says and its late answer is dropped. A cancelled prompt cancels its
session's requests the same way (the daemon's stop policy resolves the interactions).

Approvals: the decisions offered become the options (`allow_once`, `allow_for_session` as `allow_always`, `deny`
as `reject_once`); the editor's `cancelled` outcome denies. Questions: one single-choice question with options is
asked as options (and a `reject_once` "Skip"); any other question cannot be shown by an ACP editor, so it is
answered with no answer at once and the turn goes on: the editor is told so in the session (an
`agent_message_chunk`), every other client and the journal by the answer's `warning` (a `provider/warning` on the
thread).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog
import trio

from bbridge.client import Client, DaemonError
from bbridge.wire import rpc
from bbridge.wire.client_api import WARNING_MAX
from bbridge.wire.interactions import approval_answer

log = structlog.get_logger("bbridge.acp_face")

OPTION_KINDS: Final = {"allow_once": "allow_once", "allow_for_session": "allow_always", "deny": "reject_once"}
OPTION_NAMES: Final = {"allow_once": "Allow once", "allow_for_session": "Allow for this session", "deny": "Deny"}
SKIP: Final = "bbridge:skip"
NO_ANSWER: Final = {"kind": "user_answer", "answers": {}}
SUBJECT_KINDS: Final = {"command": "execute", "file_change": "edit", "tool_use": "other", "plan": "think"}


class Permissions:
    def __init__(
        self,
        conn: rpc.Connection,
        client: Client,
        session_of: Callable[[str], Any],
        send_update: Callable[[str, dict[str, Any]], Awaitable[None]],
    ) -> None:
        self.conn, self.client = conn, client
        self._session_of, self._send_update = session_of, send_update
        self.nursery: trio.Nursery | None = None
        self.client_name = "the editor"
        self._asked: dict[str, tuple[str, trio.CancelScope, str]] = {}  # daemon request id -> (session, scope, ours)
        self._ids = itertools.count(1)

    def opened(self, params: dict[str, Any]) -> None:
        """An `interaction/opened`: asked of the editor when it is an approval or question of a session's thread."""
        session_id = str(params.get("threadId"))
        if self._session_of(session_id) is None or params.get("kind") not in ("approval", "user_question"):
            return
        if params.get("requestId") in self._asked or self.nursery is None:
            return
        self.nursery.start_soon(self._ask, session_id, params)

    def resolved(self, params: dict[str, Any]) -> None:
        """An `interaction/resolved`: the editor's request for it, if still open, is cancelled."""
        asked = self._asked.get(str(params.get("requestId")))
        if asked is not None:
            log.info("resolved elsewhere; cancelling the editor's permission request", request=params.get("requestId"),
                     by=params.get("resolvedBy"))  # fmt: skip
            asked[1].cancel()

    def cancel_session(self, session_id: str) -> None:
        """A cancelled prompt: its open requests are cancelled (the daemon's stop policy answers them)."""
        for asked_session, scope, _ in self._asked.values():
            if asked_session == session_id:
                scope.cancel()

    async def reopen(self, thread_id: str) -> None:
        """A loaded session: what its thread already waits on is asked of the editor now."""
        try:
            listing = await self.client.pending(thread_id)
        except DaemonError as exc:
            log.warning("thread/pending failed", thread=thread_id, error=str(exc))
            return
        for pending in listing.pending:
            self.opened({"requestId": pending.requestId, "threadId": pending.threadId, "kind": pending.kind,
                         "params": pending.params})  # fmt: skip

    async def _ask(self, session_id: str, opened: dict[str, Any]) -> None:
        request_id = str(opened["requestId"])
        payload = (opened.get("params") or {}).get("payload") or {}
        if opened.get("kind") == "user_question" and question_options(payload) is None:
            said = (f"the agent asked {describe_questions(payload)}; {self.client_name} cannot show it over ACP, so "
                    "it was answered with no answer")  # fmt: skip
            await self._send_update(session_id, {"sessionUpdate": "agent_message_chunk",
                                                 "content": {"type": "text", "text": f"\n[bbridge: {said}]\n"}})  # fmt: skip
            await self._respond(request_id, NO_ANSWER, warning=said[:WARNING_MAX])
            return
        ours = f"bbridge-permission-{next(self._ids)}"
        scope = trio.CancelScope()
        self._asked[request_id] = (session_id, scope, ours)
        outcome: dict[str, Any] | None = None
        try:
            with scope:
                asked = {"sessionId": session_id, "toolCall": tool_call(request_id, opened.get("kind"), payload),
                         "options": options(opened.get("kind"), payload)}  # fmt: skip
                answer = await self.conn.request("session/request_permission", asked, timeout=None, id=ours)
                outcome = (answer or {}).get("outcome") or {}
        except rpc.RpcError as exc:
            log.warning("the editor's permission request failed", request=request_id, error=exc.message)
        finally:
            del self._asked[request_id]
        if scope.cancelled_caught:
            await self.conn.notify("$/cancel_request", {"requestId": ours})
            return
        await self._respond(request_id, result_of(opened, payload, outcome or {}))

    async def _respond(self, request_id: str, result: dict[str, Any], warning: str | None = None) -> None:
        """The editor's answer; `warning` (why it is not what the agent asked) goes on the thread's timeline."""
        answer = {"requestId": request_id, "result": result} | ({"warning": warning} if warning else {})
        try:
            await self.client.request("interaction/respond", answer)
        except DaemonError as exc:  # answered first by another client or the daemon's policy
            log.info("the editor's answer came second", request=request_id, reason=str(exc))


def question_options(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A question an ACP editor can show as permission options: one, single-choice, with options; else None."""
    questions = payload.get("questions") or []
    if len(questions) != 1 or questions[0].get("multiSelect") or not questions[0].get("options"):
        return None
    return list(questions[0]["options"])


def describe_questions(payload: dict[str, Any]) -> str:
    prompts = [str(q.get("prompt", "")) for q in payload.get("questions") or []]
    return "; ".join(f"“{p}”" for p in prompts) or "a question"


def options(kind: Any, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if kind == "user_question":
        choices = question_options(payload) or []
        listed = [{"optionId": str(c["value"]), "name": str(c.get("label") or c["value"]), "kind": "allow_once"}
                  for c in choices]  # fmt: skip
        return [*listed, {"optionId": SKIP, "name": "Skip", "kind": "reject_once"}]
    offered = payload.get("availableDecisions") or ["allow_once", "deny"]
    return [{"optionId": d, "name": OPTION_NAMES[d], "kind": OPTION_KINDS[d]} for d in offered if d in OPTION_KINDS]


def tool_call(request_id: str, kind: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """The `toolCall` a permission request is about: the item the approval names (its tool call's id), titled by
    what it asks."""
    if kind == "user_question":
        return {"toolCallId": request_id, "title": describe_questions(payload), "kind": "think", "status": "pending"}
    subject = payload.get("subject") or {}
    what = subject.get("command") or subject.get("tool") or subject.get("toolName") or subject.get("writeScope")
    title = f"{subject.get('kind', 'approval')}: {what}" if what else str(subject.get("kind", "approval"))
    if payload.get("reason"):
        title += f" ({payload['reason']})"
    return {"toolCallId": str(subject.get("itemId") or request_id), "title": title,
            "kind": SUBJECT_KINDS.get(str(subject.get("kind")), "other"), "status": "pending"}  # fmt: skip


def result_of(opened: dict[str, Any], payload: dict[str, Any], outcome: dict[str, Any]) -> dict[str, Any]:
    """The bb answer to the editor's outcome: a selected option, or `cancelled` (a denial, or no answer)."""
    chosen = outcome.get("optionId") if outcome.get("outcome") == "selected" else None
    if opened.get("kind") == "user_question":
        questions = payload.get("questions") or []
        if chosen is None or chosen == SKIP or not questions:
            return NO_ANSWER
        return {"kind": "user_answer", "answers": {str(questions[0]["id"]): {"selected": [str(chosen)]}}}
    if chosen not in (payload.get("availableDecisions") or []) or chosen == "deny":
        return {"decision": "deny"}
    return approval_answer(str(opened.get("requestId")), payload, str(chosen))
