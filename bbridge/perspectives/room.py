"""The Perspectives room (issue 48): the `help` and `gather_perspectives` tools any agent is offered through the
tool host, `ai/complete` and `perspectives/runs` served to the daemon's clients, and the runs themselves, all on
one connection of the daemon's client API (in process, a socket pair's end, as `bbridge acp`'s face).

A call resolves and checks both phase tuples (`tuples.resolve_phases`: the providers the daemon serves, their
`model/list`) and asks the daemon's `[[budgets]]` (`budgets/check`, once per provider and model the run would use,
with the run's id: an `ask` budget's allowance covers the run) before any hidden thread exists: a problem, or a
budget's refusal, is the tool's error result, naming it. `help` answers
when its expert has; `gather_perspectives` answers at once with a receipt and runs detached in the room's nursery
(`Runner.gather`), which ends with one message into the calling thread: a steer of its open turn, else a new turn,
with the caller's own execution options. With a tracer (`seams/telemetry.py`) each run is a
`bbridge.perspectives.run` span under the tool call that launched it, its members' turns under it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Final

import structlog
import trio

from bbridge.client import LEAVE, Client, DaemonError
from bbridge.perspectives import delivery, prompts
from bbridge.perspectives.complete import complete
from bbridge.perspectives.hidden import Hidden, Member
from bbridge.perspectives.run import Run, Runner, Stopped
from bbridge.perspectives.settings import PerspectivesConfig
from bbridge.perspectives.tuples import (
    Caller,
    Phases,
    Providers,
    Resolved,
    TupleError,
    model_list,
    resolve,
    resolve_phases,
)
from bbridge.seams.telemetry import NO_TRACER, Attribute, Tracer
from bbridge.seams.tool_host import HostedCall
from bbridge.toolhost.declarations import Policy, Presentation
from bbridge.toolhost.results import ToolCallResult, failure, text_result
from bbridge.wire import errors, rpc

log = structlog.get_logger("bbridge.perspectives")

RUNS_KEPT: Final = 200  # finished runs `perspectives/runs` still shows
QUESTION: Final = {"type": "string", "minLength": 1, "description": "the question to answer"}
CONTEXT: Final = {"type": "string", "description": "what the experts should know: the task, constraints, files"}
HELP_SCHEMA: Final = {
    "type": "object",
    "properties": {"question": QUESTION, "context": CONTEXT},
    "required": ["question"],
    "additionalProperties": False,
}
GATHER_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "question": QUESTION,
        "context": CONTEXT,
        "lenses": {
            "type": "array",
            "minItems": prompts.LENSES_MIN,
            "maxItems": prompts.LENSES_MAX,
            "items": {"type": "string", "minLength": 1},
            "description": "2 to 7 specific angles, e.g. 'big-O complexity', 'duplicate work'",
        },
    },
    "required": ["question", "lenses"],
    "additionalProperties": False,
}


class RoomTool:
    """One of the room's tools as the tool host runs it (`toolhost.host.ExternalTool`): policy `allow` by
    default, its calls decided, audited and redacted like any hosted tool's."""

    presentation: Presentation | None = None
    policy: Policy = "allow"
    source: str = "perspectives"

    def __init__(self, room: Perspectives, name: str, description: str, schema: dict[str, Any]) -> None:
        self.room = room
        self.name: str = name
        self.description: str = description
        self.schema: dict[str, Any] = schema

    async def invoke(self, arguments: dict[str, Any], call: HostedCall) -> ToolCallResult:
        if call.hidden:
            return failure(f"{self.name} is not offered to a Perspectives thread (no recursive panels)")
        if self.name == "help":
            return await self.room.help(arguments, call)
        return await self.room.gather(arguments, call)


class Perspectives:
    """The room: its tools, its client methods (a daemon `Service`) and its runs."""

    name = "perspectives"
    methods = frozenset({"ai/complete", "perspectives/runs"})

    def __init__(self, config: PerspectivesConfig, tracer: Tracer = NO_TRACER) -> None:
        self.config = config
        self.tracer = tracer
        self.runs: dict[str, Run] = {}
        self._client: Client | None = None
        self._hidden: Hidden | None = None
        self._nursery: trio.Nursery | None = None
        self.tools = [
            RoomTool(
                self,
                "help",
                "Ask one independent expert agent a question and get its concise, read-only answer (evidence cited) "
                "as this tool's result.",
                HELP_SCHEMA,
            ),
            RoomTool(
                self,
                "gather_perspectives",
                "Have a panel of independent expert agents examine a question, each through one of 2-7 lenses you "
                "give, and synthesize their evidence. Returns a launch receipt at once; the synthesized result "
                "arrives later in this conversation as a message beginning 'Perspectives panel result'.",
                GATHER_SCHEMA,
            ),
        ]

    # -- running -----------------------------------------------------------------------------------------------

    async def serve(self, client: Client, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The room on `client` until it closes: the notification pump and the detached runs."""
        hidden = Hidden(client)
        self._client, self._hidden = client, hidden

        async def pump_then_stop() -> None:
            await hidden.pump()
            nursery.cancel_scope.cancel()  # the daemon went away: its runs cannot go on

        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(pump_then_stop)
            task_status.started()

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        """A request of one of the room's hidden threads (it owns them): an approval is declined, a client tool
        call fails (nobody is watching an advisory thread); anything else is left pending."""
        hidden = self._hidden
        if hidden is None or params.get("threadId") not in hidden.members:
            return LEAVE
        if method == "interaction/request" and (params.get("payload") or {}).get("kind") == "approval":
            return {"decision": "deny"}
        if method == "item/tool/call":
            return failure("A Perspectives thread has no client tools")
        return LEAVE

    # -- the tools ---------------------------------------------------------------------------------------------

    async def help(self, arguments: dict[str, Any], call: HostedCall) -> ToolCallResult:
        run, hidden = self._run(call, "help", (), arguments), self._ready()
        try:
            phases = await self._phases(call, 0)
            await self.check_budgets(run, [phases.planner, *phases.workers[:1]])
        except (TupleError, Stopped) as exc:
            return failure(f"help: {exc} (no thread was created)")
        self._keep(run)
        runner = Runner(hidden, self.config, self.check_budgets)
        self._traced(run, call)
        try:
            return text_result(await runner.help(run, phases))
        finally:
            _ended(run)

    async def gather(self, arguments: dict[str, Any], call: HostedCall) -> ToolCallResult:
        hidden = self._ready()
        try:
            lenses = prompts.check_lenses(arguments.get("lenses") or [])
            phases = await self._phases(call, len(lenses))
            run = self._run(call, "gather_perspectives", lenses, arguments)
            await self.check_budgets(run, [phases.planner, *phases.workers])
        except (ValueError, TupleError, Stopped) as exc:
            return failure(f"gather_perspectives: {exc} (no thread was created)")
        self._keep(run)
        assert self._nursery is not None
        runner = Runner(hidden, self.config, self.check_budgets)
        self._traced(run, call)

        async def gather() -> None:
            try:
                await runner.gather(run, phases, lambda text: self._deliver(run, call, text))
            finally:
                _ended(run)

        self._nursery.start_soon(gather)
        return text_result(delivery.receipt(run.run_id, lenses))

    def _traced(self, run: Run, call: HostedCall) -> None:
        """The run's span, under the tool call that launched it (its members' turns are its children)."""
        attributes: dict[str, Attribute] = {
            "bbridge.perspectives.run_id": run.run_id,
            "bbridge.perspectives.tool": run.tool,
            "bbridge.perspectives.lenses": len(run.lenses),
            "bbridge.thread_id": run.thread_id,
        }
        run.span = self.tracer.start("bbridge.perspectives.run", call.span, attributes)

    async def check_budgets(self, run: Run, tuples: Sequence[Resolved]) -> None:
        """The daemon's budgets for what the run would use next (each provider and model once, the calling thread's
        and the run's): `Stopped`, with the daemon's words, when one refuses."""
        client = self._ready().client
        for provider_id, model in dict.fromkeys((t.provider_id, t.model) for t in tuples):
            try:
                await client.budgets_check(
                    thread_id=run.thread_id or None, provider_id=provider_id, model=model, run_id=run.run_id
                )
            except DaemonError as exc:
                if exc.code == rpc.METHOD_NOT_FOUND:
                    return  # a daemon older than its budgets: nothing to ask
                if exc.code != errors.BUDGET_EXCEEDED:
                    raise
                raise Stopped(exc.message) from None

    def _run(self, call: HostedCall, tool: Any, lenses: tuple[str, ...], arguments: dict[str, Any]) -> Run:
        context = arguments.get("context")
        return Run(
            delivery.new_run_id(),
            call.thread_id,
            tool,
            lenses,
            str(arguments.get("question") or ""),
            context if isinstance(context, str) else None,
            call.cwd or os.getcwd(),
        )

    async def _phases(self, call: HostedCall, lenses: int) -> Phases:
        """Both tuples for this caller, checked against the providers the daemon serves and their models."""
        options = call.options or {}
        model, reasoning = options.get("model"), options.get("reasoningLevel")
        caller = Caller(
            call.provider_id,
            model if isinstance(model, str) else None,
            reasoning if isinstance(reasoning, str) else None,
            options,
        )
        return resolve_phases(self.config, caller, await self._providers(call.cwd), lenses)

    async def _providers(self, cwd: str | None) -> Providers:
        """The daemon's providers and each one's `model/list` (None: it lists none), asked concurrently."""
        client = self._ready().client
        status = await client.request("daemon/status", {})
        ids = [str(p.get("providerId")) for p in status.get("providers", []) if isinstance(p, Mapping)]
        listed: dict[str, Any] = dict.fromkeys(ids)

        async def ask(provider_id: str) -> None:
            with trio.move_on_after(self.config.spawn_timeout_s):
                try:
                    params = {"providerId": provider_id, **({"cwd": cwd} if cwd else {})}
                    listed[provider_id] = model_list(await client.request("model/list", params))
                except DaemonError:
                    pass

        async with trio.open_nursery() as nursery:
            for provider_id in ids:
                nursery.start_soon(ask, provider_id)
        return listed

    async def _deliver(self, run: Run, call: HostedCall, text: str) -> None:
        """The run's one message into the calling thread: a steer of its open turn, else a new turn (under the run's
        span when traced)."""
        client = self._ready().client
        turn: dict[str, Any] = {
            "threadId": run.thread_id,
            "input": [{"type": "text", "text": text, "mentions": []}],
            "options": call.options or {},
        }
        open_turn = await self._open_turn(run.thread_id)
        if open_turn is not None:
            try:
                await client.request("turn/steer", {**turn, "expectedTurnId": open_turn})
                return
            except DaemonError as exc:  # the turn ended meanwhile: the message starts one
                log.info("a perspectives delivery could not steer; starting a turn", run=run.run_id, error=exc.message)
        trace = run.span.carrier()  # the turn the delivery starts is the run's, as its members' are
        await client.request("turn/start", {**turn, **({"_meta": trace} if trace else {})})

    async def _open_turn(self, thread_id: str) -> str | None:
        status = await self._ready().client.request("daemon/status", {})
        for row in status.get("threads", []):
            if row.get("threadId") == thread_id and row.get("openTurns"):
                return str(row["openTurns"][-1])
        return None

    def _ready(self) -> Hidden:
        if self._hidden is None:
            raise RuntimeError("the Perspectives room is not serving yet")
        return self._hidden

    def _keep(self, run: Run) -> None:
        self.runs[run.run_id] = run
        finished = [r for r in self.runs.values() if r.phase == "done"]
        for old in finished[: max(0, len(finished) - RUNS_KEPT)]:
            del self.runs[old.run_id]

    # -- the client methods (a daemon `Service`) ---------------------------------------------------------------

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method == "perspectives/runs":
            thread = params.get("threadId")
            return {"runs": [r.view() for r in self.runs.values() if thread is None or r.thread_id == thread]}
        return await self._complete(params)

    async def _complete(self, params: dict[str, Any]) -> Any:
        """`ai/complete`: one hidden thread in an empty directory, the planner tuple's provider unless named."""
        prompt, schema, timeout_ms = params.get("prompt"), params.get("outputSchema"), params.get("timeoutMs")
        if not isinstance(prompt, str) or not prompt or not isinstance(schema, dict) or not isinstance(timeout_ms, int):
            raise rpc.RpcError(rpc.INVALID_PARAMS, "ai/complete needs prompt, outputSchema (object), timeoutMs")
        provider = params.get("providerId") or self.config.planner.provider
        if not isinstance(provider, str):
            raise rpc.RpcError(
                rpc.INVALID_PARAMS, "ai/complete needs providerId (or a provider in [perspectives] planner)"
            )
        phase = type(self.config.planner)(
            provider=provider, model=params.get("model"), reasoning=params.get("reasoningLevel"), permission="auto"
        )
        caller = Caller(provider, None, None, {})
        try:
            resolved = resolve(phase, caller, await self._providers(None), where="ai/complete")
        except TupleError as exc:
            raise rpc.RpcError(rpc.INVALID_PARAMS, str(exc)) from None
        run = Run(delivery.new_run_id(), "", "help", (), prompt, None, "")
        member = Member(run.run_id, "planner", resolved)
        with tempfile.TemporaryDirectory(prefix="bbridge-complete-") as cwd:
            done = await complete(self._ready(), member, prompt, schema, timeout_ms / 1000, self.config, cwd)
            await self._ready().release(member)
        if done.ok:
            return {"ok": True, "model": resolved.model or "", "value": done.value}
        return {"ok": False, "code": done.code, "message": done.message}

    def report(self) -> dict[str, Any]:
        """`daemon/status`'s `perspectives`: the runs kept, by outcome (the listener's `/metrics` counts them)."""
        counts = {"running": 0, "delivered": 0, "failed": 0, "undelivered": 0}
        for run in self.runs.values():
            counts[run.outcome or "running"] += 1
        return {"runs": counts}


def _ended(run: Run) -> None:
    """A run's span ends with its outcome and members (failed unless it delivered)."""
    run.span.set("bbridge.perspectives.outcome", run.outcome or "unfinished")
    run.span.set("bbridge.perspectives.members", len(run.members))
    run.span.end(None if run.outcome == "delivered" else f"the run ended {run.outcome or 'unfinished'}")
