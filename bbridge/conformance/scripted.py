"""The scripted rules against a live bridge (protocol.md §7.3, §7.5, §7.6).

Three groups, each on its own fresh bridge process, run concurrently:

* the kit's single transport (§7.2): hygiene → handshake → session lifecycle,
  with the host-side live grammar (§7.5) over everything assembled;
* the interrupt rule (§7.6), which needs a turn that is still running;
* the skills rule (§7.6), where `skills/configure` follows `initialize` as the
  runtime sends it at startup (§2.1).

A rule whose prerequisite failed is SKIP with the reason, never a cascade.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from bbridge.conformance import assembled
from bbridge.conformance.fixture import Fixture
from bbridge.conformance.results import Result, failed, passed, skipped
from bbridge.core.events import Event
from bbridge.daemon.bridge import RUNTIME_GRAMMAR
from bbridge.replay.bridge_client import BridgeClient, BridgeOutput, describe_error
from bbridge.wire import protocol, rpc

T = TypeVar("T")

HYGIENE = ("rpc/unknown-method", "rpc/invalid-params", "rpc/non-json-ignored", "rpc/response-not-request")
HANDSHAKE = "handshake/initialize"
LIFECYCLE = (
    "session/start-identity",
    "turn/lifecycle",
    assembled.SCHEMA,
    "stop/release-not-interrupted",
    "session/resume-id-uniqueness",
    "turn/settles-without-activity",
)
INTERRUPT = "turn/interrupt-settles-before-response"
SKILLS = "skills/configure-matches-declaration"
RULES = (*HYGIENE, HANDSHAKE, *LIFECYCLE, *assembled.GRAMMAR, *assembled.SUSPECTS, INTERRUPT, SKILLS, assembled.ICONS)

UNKNOWN_METHOD = "bb/conformance/definitely-unknown-method"
UNKNOWN_NOTIFICATION = "bb/conformance/unknown-notification"
ALIVE_PROBE = "bb/conformance/alive-probe"
THREAD = "thr_conformance_1"
INTERRUPT_THREAD = "thr_conformance_interrupt"
INITIALIZE = {
    "protocolVersion": protocol.PROTOCOL_VERSION,
    "client": {"name": "bb-conformance", "version": "0.0.1"},
    "grammarVersions": list(RUNTIME_GRAMMAR),
}
_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"
_COMPLETIONS = ("item/completed", "item/backgroundTask/completed", "item/delegation/completed")


class RequestIds:
    """The kit's deterministic clientRequestIds (§7.1): a counter in base 32, `2`-padded, `creq_`-prefixed."""

    def __init__(self) -> None:
        self._n = 0

    def __call__(self) -> str:
        self._n += 1
        n, digits = self._n, ""
        while n:
            n, digit = divmod(n, 32)
            digits = _ALPHABET[digit] + digits
        return "creq_" + digits.rjust(10, "2")


@dataclass
class Run:
    """One group's bridge, its fixture and what it needs to drive a session."""

    client: BridgeClient
    fixture: Fixture
    cwd: str
    creq: RequestIds

    @property
    def wait(self) -> float:
        return self.fixture.timeouts.wait

    async def call(self, method: str, params: Any) -> tuple[Any, dict[str, Any] | None]:
        rid = await self.client.request(method, params)
        return rid, await self.client.wait_response(rid, self.wait)

    def first(self, start: int, match: Callable[[Event], bool]) -> Event | None:
        return next((e for e in self.client.events(start) if match(e)), None)

    async def event_or_refusal(
        self, rid: Any, mark: int, match: Callable[[Event], bool]
    ) -> tuple[Event | None, dict[str, Any] | None]:
        """The first matching event after `mark`, or the error answer to `rid` if that comes first (or neither)."""
        client = self.client

        def found() -> tuple[Event | None, dict[str, Any] | None] | None:
            event = self.first(mark, match)
            if event is not None:
                return event, None
            index = client.response_index(rid)
            if index is not None and _is_error(client.log[index].message):
                return None, client.log[index].message
            return None

        return await client.wait_for(found, self.wait) or (None, None)

    def gone(self) -> str:
        """Why nothing came: a timeout, or the bridge exited."""
        if self.client.exited:
            return self.client.death_note
        return f"nothing within {self.wait:g}s"


def _is_error(response: dict[str, Any]) -> bool:
    return bool(response.get("error"))


def _describe(response: dict[str, Any]) -> str:
    if _is_error(response):
        return describe_error(response)
    return "result " + msgspec.json.encode(response.get("result")).decode()[:200]


def _error_code(response: dict[str, Any] | None) -> Any:
    error = (response or {}).get("error")
    return error.get("code") if isinstance(error, dict) else None


def _turn_of(event: Event) -> str | None:
    scope = event["scope"]
    return scope["turnId"] if scope["kind"] == "turn" else None


def _typed(kind: str, thread: str, turn: str | None = None) -> Callable[[Event], bool]:
    return lambda e: e["type"] == kind and e["threadId"] == thread and (turn is None or _turn_of(e) == turn)


# -- handshake ----------------------------------------------------------------


async def initialize(run: Run) -> Result:
    """`handshake/initialize`: the result parses, protocol 2, grammar ranges intersect (the runtime's own checks)."""
    _, response = await run.call("initialize", INITIALIZE)
    if response is None:
        return failed(HANDSHAKE, f"initialize got no answer: {run.gone()}")
    if _is_error(response):
        return failed(HANDSHAKE, f"initialize answered {describe_error(response)}")
    try:
        caps = protocol.check_initialize(run.client.provider_id, msgspec.json.encode(response.get("result")))
    except protocol.HandshakeRefused as exc:
        return failed(HANDSHAKE, str(exc))
    version = protocol.negotiate(RUNTIME_GRAMMAR, caps.grammarVersions)
    bmin, bmax = caps.grammarVersions
    return passed(HANDSHAKE, f"protocol version 2; grammar {version} negotiated from the bridge's {bmin}-{bmax}")


# -- hygiene (§1.8) -----------------------------------------------------------


async def hygiene(run: Run) -> list[Result]:
    client = run.client
    results: list[Result] = []
    _, response = await run.call(UNKNOWN_METHOD, {})
    if response is None:
        results.append(failed(HYGIENE[0], f"silently dropped: {run.gone()}"))
    elif _error_code(response) == rpc.METHOD_NOT_FOUND:
        results.append(passed(HYGIENE[0], "answered -32601"))
    else:
        results.append(failed(HYGIENE[0], f"answered {_describe(response)} instead of -32601"))
    answers_unknown = response is not None

    _, response = await run.call("thread/stop", {})
    results.append(_invalid_params(run, response))

    if not answers_unknown:
        reason = "unknown methods are not answered, so the alive probe cannot tell whether the bridge still serves"
        return [*results, skipped(HYGIENE[2], reason), skipped(HYGIENE[3], reason)]

    mark = client.mark()
    await client.send_line(b"this is { not json")
    results.append(await _probe(run, mark, HYGIENE[2], "the bridge kept serving after a non-JSON line", strict=False))

    mark = client.mark()
    await client.send_line(b'{"jsonrpc":"2.0","id":999999,"result":{}}')
    await client.notify(UNKNOWN_NOTIFICATION, {})
    ok = "an unsolicited response and an unknown notification were ignored; the alive probe was answered"
    results.append(await _probe(run, mark, HYGIENE[3], ok, strict=True))
    return results


def _invalid_params(run: Run, response: dict[str, Any] | None) -> Result:
    rule = HYGIENE[1]
    if response is None:
        return failed(rule, f"thread/stop {{}} was dropped ({run.gone()}); the runtime would only see a 30 s timeout")
    if _error_code(response) != rpc.INVALID_PARAMS:
        return failed(rule, f"thread/stop {{}} answered {_describe(response)} instead of -32602")
    error = response["error"]
    issues = error.get("data")
    if (
        isinstance(issues, list)
        and issues
        and all(
            isinstance(i, dict) and isinstance(i.get("path"), list) and isinstance(i.get("message"), str)
            for i in issues
        )
    ):
        first = issues[0]
        return passed(rule, f"answered -32602 with {len(issues)} issue(s), first {first['path']}: {first['message']}")
    # The Claude Code and Codex references carry the issues in the message only (no `data`): `{}` misses
    # `threadId`, so a message that carries the issues names it.
    message = error.get("message")
    if issues is None and isinstance(message, str) and "threadId" in message:
        return passed(rule, f"answered -32602 with the issues in its message: {message[:200]!r}")
    return failed(
        rule,
        "answered -32602 without the validation issues (error.data must be [{path, message}, ...], "
        "or the message must name them, e.g. the missing threadId)",
    )


async def _probe(run: Run, mark: int, rule: str, ok: str, *, strict: bool) -> Result:
    """Send the alive probe: it must be answered. An answer since `mark` to something that was not a request fails
    when `strict` (§7.3 `rpc/response-not-request`), and is only noted otherwise (`rpc/non-json-ignored` asks no
    more than that the bridge keeps serving)."""
    client = run.client
    _, response = await run.call(ALIVE_PROBE, {})
    if response is None:
        return failed(rule, f"the alive probe got no answer ({run.gone()}): the bridge stopped serving")
    stray = next((e for e in client.log[mark:] if _answers_nothing(client, e)), None)
    if stray is None:
        return passed(rule, ok)
    text = stray.message if isinstance(stray.message, str) else msgspec.json.encode(stray.message).decode()
    if strict:
        return failed(rule, f"answered something that was not a request: {text[:200]}")
    return passed(rule, f"{ok}; note: it answered the line ({text[:200]}), where §1.8 says to ignore it")


def _answers_nothing(client: BridgeClient, entry: BridgeOutput) -> bool:
    """A response to an id the client never used, or an error/result object without a usable id."""
    message = entry.message
    if entry.kind == "response":
        return message.get("id") not in client.sent_ids
    return entry.kind == "junk" and isinstance(message, dict) and ("error" in message or "result" in message)


# -- session lifecycle (§7.3, §4.2, §4.6) ------------------------------------------


def _session_params(run: Run, thread: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "cwd": run.cwd,
        "options": run.fixture.execution_options,
        "instructionMode": "append",
    }


def _turn_params(run: Run, thread: str, ptid: str, inputs: Sequence[Any], creq: str) -> dict[str, Any]:
    options = run.fixture.execution_options
    return {"threadId": thread, "providerThreadId": ptid, "input": inputs, "clientRequestId": creq, "options": options}


async def start_session(run: Run, thread: str) -> tuple[Result, str | None]:
    """`session/start-identity` plus the §4.2 order: thread/identity, then session.reset, then the response."""
    rule = LIFECYCLE[0]
    client = run.client
    mark = client.mark()
    rid, response = await run.call("thread/start", _session_params(run, thread))
    if response is None:
        return failed(rule, f"thread/start got no answer: {run.gone()}"), None
    if _is_error(response):
        return failed(rule, f"thread/start answered {describe_error(response)}"), None
    try:
        ptid = msgspec.convert(response.get("result"), protocol.ThreadIdentityResult).providerThreadId
    except msgspec.ValidationError as exc:
        return failed(rule, f"the result is not a thread identity ({protocol.issue_text(exc)})"), None
    window = client.log[mark : client.response_index(rid)]
    problems = _opening_order(window, thread, ptid)
    if problems:
        return failed(rule, "; ".join(problems)), ptid
    return passed(rule, f"providerThreadId {ptid!r}; thread/identity, session.reset, then the response"), ptid


def _opening_order(window: list[BridgeOutput], thread: str, ptid: str) -> list[str]:
    identity = reset = first_delta = None
    for index, entry in enumerate(window):
        message = entry.message
        if entry.kind != "notification" or (message.get("params") or {}).get("threadId") != thread:
            continue
        if message["method"] == "thread/identity" and identity is None:
            identity = index
            if message["params"].get("providerThreadId") != ptid:
                return [f"thread/identity names {message['params'].get('providerThreadId')!r}, the result {ptid!r}"]
        elif message["method"] == "thread/delta":
            first_delta = index if first_delta is None else first_delta
            deltas = message["params"].get("deltas") or []
            if reset is None and any(isinstance(d, dict) and d.get("kind") == "session.reset" for d in deltas):
                reset = index
    problems = []
    if identity is None:
        problems.append("no thread/identity notification before the thread/start response (§4.2)")
    if reset is None:
        problems.append("no session.reset delta before the thread/start response (§4.2)")
    if identity is not None and first_delta is not None and first_delta < identity:
        problems.append("a thread/delta for the new session arrived before its thread/identity (§4.2)")
    return problems


async def run_turn(run: Run, thread: str, ptid: str, inputs: Sequence[Any]) -> tuple[str, int, Any]:
    """Send turn/start; its clientRequestId, the log mark and the request id."""
    creq = run.creq()
    mark = run.client.mark()
    rid = await run.client.request("turn/start", _turn_params(run, thread, ptid, inputs, creq))
    return creq, mark, rid


async def await_turn(
    run: Run, thread: str, mark: int, rid: Any
) -> tuple[Event | None, Event | None, dict[str, Any] | None]:
    """Wait for the turn's turn/started, then its turn/completed, then the response (or an error response)."""
    started, refusal = await run.event_or_refusal(rid, mark, _typed("turn/started", thread))
    if started is None:
        return None, None, refusal
    turn = _turn_of(started)
    completed = await run.client.wait_for(lambda: run.first(mark, _typed("turn/completed", thread, turn)), run.wait)
    return started, completed, await run.client.wait_response(rid, run.wait)


async def lifecycle(run: Run) -> dict[str, Result]:
    results: dict[str, Result] = {}
    start, ptid = await start_session(run, THREAD)
    results[LIFECYCLE[0]] = start
    if ptid is None:
        reason = "prerequisite session/start-identity failed: no thread identity"
        return results | {rule: skipped(rule, reason) for rule in LIFECYCLE[1:] if rule != LIFECYCLE[2]}
    results[LIFECYCLE[1]] = await _first_turn(run, ptid)
    results[LIFECYCLE[3]] = await _release(run, ptid)
    results[LIFECYCLE[4]], ptid = await _resume(run, ptid)
    results[LIFECYCLE[5]] = await _zero_work(run, ptid)
    return results


async def _first_turn(run: Run, ptid: str) -> Result:
    rule = LIFECYCLE[1]
    creq, mark, rid = await run_turn(run, THREAD, ptid, run.fixture.prompt_input)
    started, completed, response = await await_turn(run, THREAD, mark, rid)
    if started is None:
        why = f"turn/start answered {describe_error(response)}" if response else run.gone()
        return failed(rule, f"no turn/started: {why}")
    turn = _turn_of(started)
    if completed is None:
        return failed(
            rule, f"turn {turn} started but never completed ({run.gone()}): a turn needs exactly one settlement"
        )
    if response is None:
        return failed(rule, f"turn {turn} completed but turn/start got no answer: {run.gone()}")
    if _is_error(response):
        return failed(rule, f"turn {turn} ran but turn/start answered {describe_error(response)}")
    accepted = run.first(mark, lambda e: e["type"] == "turn/input/accepted" and e.get("clientRequestId") == creq)
    if accepted is None:
        return failed(rule, f"turn {turn} has no input.accepted for clientRequestId {creq} (§4.6)")
    return passed(rule, f"turn {turn}: input accepted, started, completed {completed['status']}, turn/start answered")


async def _stop(
    run: Run, rule: str, thread: str, ptid: str, intent: str, active: str | None
) -> tuple[Any, Result | None]:
    """Send `thread/stop`: its id, and the FAIL of `rule` when it went unanswered or was refused."""
    params = {"threadId": thread, "providerThreadId": ptid, "intent": intent, "activeTurnId": active}
    rid, response = await run.call("thread/stop", params)
    if response is None:
        return rid, failed(rule, f"thread/stop {intent} got no answer: {run.gone()}")
    if _is_error(response):
        return rid, failed(rule, f"thread/stop {intent} answered {describe_error(response)}")
    return rid, None


async def _release(run: Run, ptid: str) -> Result:
    rule = LIFECYCLE[3]
    client = run.client
    client.guard.clear_thread(THREAD)  # the runtime forgets a detached thread's grammar (§7.5)
    mark = client.mark()
    _, refused = await _stop(run, rule, THREAD, ptid, "release", None)
    if refused is not None:
        return refused
    await client.quiet(run.fixture.timeouts.settle, run.wait)
    for event in client.events(mark):
        interrupted = (event["type"] == "turn/completed" and event.get("status") == "interrupted") or (
            event["type"] in _COMPLETIONS and msgspec.to_builtins(event["item"]).get("status") == "interrupted"
        )
        if interrupted:
            return failed(rule, f"release fabricated an interruption: {event['type']} (interrupted)")
    return passed(rule, "answered without fabricating an interruption")


async def _resume(run: Run, ptid: str) -> tuple[Result, str]:
    rule = LIFECYCLE[4]
    _, response = await run.call("thread/resume", {**_session_params(run, THREAD), "providerThreadId": ptid})
    if response is None:
        return skipped(rule, f"thread/resume got no answer: {run.gone()}"), ptid
    if _is_error(response):
        return skipped(rule, f"thread/resume answered {describe_error(response)}"), ptid
    ptid = protocol.resolve_provider_thread_id(response.get("result"), THREAD) or ptid
    _, mark, rid = await run_turn(run, THREAD, ptid, run.fixture.prompt_input)
    _, completed, _ = await await_turn(run, THREAD, mark, rid)
    if completed is None:
        return failed(rule, f"no turn/completed for the turn after resume ({run.gone()})"), ptid
    turns = Counter(_turn_of(e) for e in run.client.events() if e["type"] == "turn/started" and _turn_of(e))
    items = Counter(e["item"]["id"] for e in run.client.events() if e["type"] == "item/started")
    repeated = [f"turn {t}" for t, n in turns.items() if n > 1] + [f"item {i}" for i, n in items.items() if n > 1]
    if repeated:
        return failed(rule, f"ids repeated across the resume: {', '.join(repeated[:3])} (session.reset, §4.2)"), ptid
    if len(turns) < 2:
        return failed(rule, f"{len(turns)} turn(s) started; the resumed session must run a second turn"), ptid
    return passed(rule, f"{len(turns)} turns and {len(items)} items, every id unique across the resume"), ptid


async def _zero_work(run: Run, ptid: str) -> Result:
    rule = LIFECYCLE[5]
    if run.fixture.zero_work_input is None:
        return skipped(rule, "the fixture has no zeroWorkPromptInput (no result)")
    _, mark, rid = await run_turn(run, THREAD, ptid, run.fixture.zero_work_input)
    completed, refusal = await run.event_or_refusal(rid, mark, _typed("turn/completed", THREAD))
    if refusal is not None:
        return skipped(rule, f"turn/start answered {describe_error(refusal)}")
    if completed is None:
        return failed(rule, f"no turn/completed for the zero-work prompt ({run.gone()}); it must still settle (§4.6)")
    return passed(rule, f"the zero-work prompt settled its turn ({completed['status']})")


# -- the groups ------------------------------------------------------------------------


async def main_group(run: Run) -> dict[str, Result]:
    """The kit's transport: hygiene, handshake, then (only after a handshake) the session lifecycle."""
    results = {r.rule: r for r in await hygiene(run)}
    results[HANDSHAKE] = handshake = await initialize(run)
    if handshake.status != "PASS":
        reason = "prerequisite handshake/initialize failed"
        return results | {rule: skipped(rule, reason) for rule in LIFECYCLE}
    return results | await lifecycle(run)


async def interrupt_group(run: Run) -> Result:
    """`turn/interrupt-settles-before-response`: the settlement of a live turn precedes the stop's answer."""
    if run.fixture.interrupt_input is None:
        return skipped(INTERRUPT, "the fixture has no interruptPromptInput")
    handshake = await initialize(run)
    if handshake.status != "PASS":
        return skipped(INTERRUPT, f"prerequisite handshake failed: {handshake.reason}")
    start, ptid = await start_session(run, INTERRUPT_THREAD)
    if ptid is None:
        return skipped(INTERRUPT, f"prerequisite thread/start failed: {start.reason}")
    client = run.client
    _, mark, rid = await run_turn(run, INTERRUPT_THREAD, ptid, run.fixture.interrupt_input)
    started, refusal = await run.event_or_refusal(rid, mark, _typed("turn/started", INTERRUPT_THREAD))
    if started is None:
        why = describe_error(refusal) if refusal else run.gone()
        return failed(INTERRUPT, f"the interruptPromptInput turn never started: {why}")
    turn = _turn_of(started)
    assert turn is not None
    if run.first(mark, _typed("turn/completed", INTERRUPT_THREAD, turn)) is not None:
        # the rule speaks of a *live* turn: one that finished on its own leaves nothing to check
        return skipped(INTERRUPT, f"turn {turn} finished on its own before the interrupt could be sent")
    active = client.assembler.get_provider_turn_id(INTERRUPT_THREAD, turn) or turn
    stop, refused = await _stop(run, INTERRUPT, INTERRUPT_THREAD, ptid, "interrupt", active)
    if refused is not None:
        return refused
    return _settled_before(run, mark, client.response_index(stop), turn)


def _settled_before(run: Run, mark: int, answer: int | None, turn: str) -> Result:
    before = run.client.events(mark, answer)
    completed = next((e for e in before if _typed("turn/completed", INTERRUPT_THREAD, turn)(e)), None)
    if completed is None:
        late = run.first(mark, _typed("turn/completed", INTERRUPT_THREAD, turn)) is not None
        where = "only after" if late else "not before"
        return failed(INTERRUPT, f"turn {turn} settled {where} the stop's response; its settlement must come first")
    if completed.get("status") != "interrupted":
        # a turn the provider finished before the interrupt took effect settled in order, but was not interrupted
        return skipped(
            INTERRUPT, f"turn {turn} finished on its own ({completed.get('status')}) before the interrupt took effect"
        )
    open_items: dict[str, str] = {}
    for event in before:
        if "item" not in event:
            continue
        item = msgspec.to_builtins(event["item"])
        if event["type"] == "item/started" and _turn_of(event) == turn and not _background(item):
            open_items[item["id"]] = item["type"]
        elif event["type"] in _COMPLETIONS:
            open_items.pop(item["id"], None)
    if open_items:
        item_id, kind = next(iter(open_items.items()))
        return failed(INTERRUPT, f"item {item_id} ({kind}) was still open at the stop's response")
    return passed(INTERRUPT, f"turn {turn} settled interrupted, its items closed, before the stop's response")


def _background(item: Any) -> bool:
    """Background work may outlive a turn (§4.7); an interrupt does not have to close it."""
    return item["type"] == "backgroundTask" or (item["type"] == "delegation" and bool(item.get("background")))


async def skills_group(run: Run) -> Result:
    """`skills/configure-matches-declaration`, sent right after `initialize` as the runtime does at startup."""
    handshake = await initialize(run)
    if handshake.status != "PASS":
        return skipped(SKILLS, f"prerequisite handshake failed: {handshake.reason}")
    roots = run.fixture.skill_roots or [{"id": "conformance", "path": run.cwd, "skills": []}]
    _, response = await run.call("skills/configure", {"roots": roots})
    declared = run.fixture.skills_declared
    if response is None:
        return failed(SKILLS, f"skills/configure got no answer: {run.gone()}")
    if declared and _is_error(response):
        return failed(SKILLS, f"skills are declared but skills/configure answered {describe_error(response)}")
    if declared:
        return passed(SKILLS, "skills are declared and skills/configure succeeded")
    if _error_code(response) == rpc.METHOD_NOT_FOUND:
        return passed(SKILLS, "skills are not declared and skills/configure answered -32601")
    if not _is_error(response):
        return failed(
            SKILLS, "skills/configure succeeded but the fixture does not declare skills (set skills.declared)"
        )
    return failed(
        SKILLS, f"skills are not declared, so skills/configure must answer -32601, not {describe_error(response)}"
    )
