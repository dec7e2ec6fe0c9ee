"""Helper inference (`ai/complete`): one prompt to one hidden thread, its answer a JSON object checked against
the caller's `outputSchema`, with one repair attempt on an answer that does not fit. The planner asks through the
same path.

The check runs in a worker thread (jsonschema, off the event path). An answer is read leniently: the first JSON
object in the agent's text (a fenced block too). What goes wrong is one of the seed contract's codes: `timeout`
(the budget ran out), `invalid_response` (no fitting object after the repair), `auth_required`, `rate_limited`,
`service_unavailable` (the provider's error category says so) or `request_failed` (anything else).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import jsonschema
import trio

from bbridge.perspectives.hidden import Hidden, Member, MemberFailed

if TYPE_CHECKING:
    from bbridge.perspectives.settings import PerspectivesConfig

Code = Literal["timeout", "rate_limited", "service_unavailable", "auth_required", "request_failed", "invalid_response"]
# a provider error's category (assembler.md's vocabulary) as the contract's code
BY_CATEGORY: Final[dict[str, Code]] = {
    "unauthorized": "auth_required",
    "billing": "auth_required",
    "rate-limit": "rate_limited",
    "overloaded": "service_unavailable",
    "connection-failed": "service_unavailable",
    "stream-disconnected": "service_unavailable",
}


@dataclass(frozen=True)
class Completion:
    ok: bool
    value: Any = None
    code: Code | None = None
    message: str = ""


def instructions(prompt: str, schema: dict[str, Any]) -> str:
    return (
        f"{prompt}\n\nAnswer with one JSON object only, no prose, valid against this JSON Schema:\n"
        f"{json.dumps(schema, ensure_ascii=False)}"
    )


def repair(problem: str, schema: dict[str, Any]) -> str:
    return (
        f"Your answer could not be used: {problem}. Answer again with one JSON object only, valid against this "
        f"JSON Schema:\n{json.dumps(schema, ensure_ascii=False)}"
    )


async def complete(
    hidden: Hidden,
    member: Member,
    prompt: str,
    schema: dict[str, Any],
    budget_s: float,
    config: PerspectivesConfig,
    cwd: str,
) -> Completion:
    """The member's answer to `prompt` as a JSON object valid against `schema`, within `budget_s` (the thread's
    construction included), one repair included."""
    deadline = time.monotonic() + budget_s
    with trio.move_on_after(budget_s):
        try:
            await hidden.spawn(member, cwd, min(config.spawn_timeout_s, budget_s))
            asked = instructions(prompt, schema)
            for attempt in (1, 2):
                text = await hidden.answer(member, asked, max(0.0, deadline - time.monotonic()))
                if member.status == "timed_out":
                    return Completion(False, code="timeout", message=f"no answer within {budget_s:g}s")
                if member.status == "failed":
                    return Completion(False, code=_code(member), message=member.error or "the turn failed")
                value, problem = await trio.to_thread.run_sync(_checked, text, schema)
                if problem is None:
                    return Completion(True, value)
                if attempt == 2:
                    return Completion(False, code="invalid_response", message=problem)
                member.done, member.accepted = trio.Event(), trio.Event()
                member.text.clear()
                member.open_text.clear()
                asked = repair(problem, schema)
        except MemberFailed as exc:
            return Completion(False, code=_code(member), message=str(exc))
    return Completion(False, code="timeout", message=f"no answer within {budget_s:g}s")


def _code(member: Member) -> Code:
    return BY_CATEGORY.get(member.error_category or "", "request_failed")


def _checked(text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """The first JSON object in `text` and why it does not fit `schema` (None: it does)."""
    value = first_object(text)
    if value is None:
        return None, "it held no JSON object"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the object"
        return value, f"{where}: {exc.message}"
    except jsonschema.SchemaError as exc:
        return value, f"the output schema is invalid: {exc.message}"
    return value, None


def first_object(text: str) -> Any:
    """The first JSON object in a model's text (bare, or in a fenced block), or None."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None
