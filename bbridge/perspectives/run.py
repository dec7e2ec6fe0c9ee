"""A Perspectives run: `help` (planner, then one expert, the answer the tool result) and `gather_perspectives`
(planner, 2–7 concurrent workers, a synthesis, one delivery), under the seed's budgets.

The budgets are phase boundaries, not a quorum: every worker gets the whole panel phase; an unfinished one is asked
once to wrap up (`wrapup_s` into the panel) and at the phase's end its output so far is taken as `partial`
evidence. The panel phase ends `synthesis_s` before the hard cap, so the synthesis always has its time; the hard
cap is one cancel scope around the whole run that interrupts every remaining thread. A worker that fails, or whose
launch fails, cancels nothing else. The daemon's `[[budgets]]` are asked again before the panel and before the
synthesis (`check`, the room's `budgets/check`): one that refuses stops the run there (`Stopped`). Whatever happens
the run ends in exactly one delivery (`deliver`, shielded): a result when the synthesis finished, else a failure
holding the partial synthesis and the raw outputs.

A run is a `bbridge.perspectives.run` span when the daemon traces (`Run.span`, under the tool call that launched
it; the room ends it): every member's turns carry its trace context (`Member.trace`), so they are its children.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import structlog
import trio

from bbridge.perspectives import delivery, prompts
from bbridge.perspectives.complete import Completion, complete
from bbridge.perspectives.hidden import Hidden, Member, MemberFailed, Role
from bbridge.perspectives.settings import PerspectivesConfig
from bbridge.perspectives.tuples import Phases, Resolved
from bbridge.seams.telemetry import NO_SPAN, Span

log = structlog.get_logger("bbridge.perspectives")

Phase = Literal["planning", "panel", "synthesis", "delivering", "done"]
Outcome = Literal["delivered", "failed", "undelivered"]  # `undelivered`: the one delivery itself failed
Deliver = Callable[[str], Awaitable[None]]  # the one message into the calling thread
Check = Callable[["Run", Sequence[Resolved]], Awaitable[None]]  # the budgets before a phase; `Stopped` refuses


class Stopped(Exception):
    """A budget refused the run's next phase; the message is the daemon's (the budget, spent and limit)."""


async def _unchecked(run: Run, tuples: Sequence[Resolved]) -> None:
    """No budgets to ask."""


@dataclass
class Run:
    """One call's run, as `perspectives/runs` shows it."""

    run_id: str
    thread_id: str  # the calling thread
    tool: Literal["help", "gather_perspectives"]
    lenses: tuple[str, ...]
    question: str
    context: str | None
    cwd: str
    phase: Phase = "planning"
    outcome: Outcome | None = None
    started_at: float = field(default_factory=time.time)
    members: list[Member] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    span: Span = NO_SPAN  # its `bbridge.perspectives.run` span (`NO_SPAN` untraced)

    def view(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "threadId": self.thread_id,
            "tool": self.tool,
            "lenses": list(self.lenses),
            "phase": self.phase,
            **({"outcome": self.outcome} if self.outcome else {}),
            "startedAt": self.started_at,
            "members": [_member_view(m) for m in self.members],
        }

    def hidden_ids(self, *but: Member | None) -> list[str]:
        return [m.thread_id for m in self.members if m not in but]


def _member_view(member: Member) -> dict[str, Any]:
    view: dict[str, Any] = {
        "role": member.role,
        "providerId": member.resolved.provider_id,
        "model": member.resolved.model,
        "threadId": member.thread_id,
        "status": "running" if member.status == "pending" else member.status,
        "seconds": member.seconds(),
    }
    if member.lens is not None and member.role == "worker":
        view["lens"] = member.lens
    if member.usage is not None:
        view["usage"] = member.usage
    return view


class Runner:
    """Runs help and panels on the room's hidden threads."""

    def __init__(self, hidden: Hidden, config: PerspectivesConfig, check: Check = _unchecked) -> None:
        self.hidden = hidden
        self.config = config
        self.check = check

    def member(self, run: Run, role: Role, resolved: Resolved, lens: str | None = None) -> Member:
        member = Member(run.run_id, role, resolved, lens, trace=run.span.carrier())
        run.members.append(member)
        return member

    # -- the planner -------------------------------------------------------------------------------------------

    async def plan(self, run: Run, planner: Resolved, lenses: Sequence[str]) -> tuple[str, ...]:
        """One expert prompt per lens from the planner (`ai/complete`'s path, its one repair the retry), within
        `planner_s`; the built-in prompts when it fails, the run's notes saying so."""
        member = self.member(run, "planner", planner)
        asked = prompts.planner_prompt(run.question, run.context, lenses)
        done: Completion = await complete(
            self.hidden, member, asked, prompts.plan_schema(lenses), self.config.planner_s, self.config, run.cwd
        )
        await self.hidden.release(member)
        if done.ok:
            try:
                return prompts.parse_plan(done.value, lenses)
            except prompts.PlanError as exc:
                log.info("the planner's answer did not fit", run=run.run_id, error=str(exc))
        else:
            log.info("the planner failed", run=run.run_id, code=done.code, error=done.message)
        run.notes.append(delivery.PLANNER_FALLBACK_NOTE)
        return tuple(prompts.builtin_prompt(lens) for lens in lenses)

    # -- help --------------------------------------------------------------------------------------------------

    async def help(self, run: Run, phases: Phases) -> str:
        """help: a planned expert prompt, then one expert's concise answer, as the tool's result text."""
        expert: Member | None = None
        with trio.move_on_after(self.config.hard_cap_s):
            (planned,) = await self.plan(run, phases.planner, (prompts.HELP_LENS,))
            run.phase = "panel"
            expert = self.member(run, "expert", phases.workers[0])
            try:
                await self._checked(run, phases.workers[:1])
                await self.hidden.spawn(expert, run.cwd, self.config.spawn_timeout_s)
                budget = self.config.hard_cap_s - (time.time() - run.started_at)
                await self.hidden.answer(expert, prompts.expert_prompt(planned, run.question, run.context), budget)
            except MemberFailed as exc:
                run.notes.append(str(exc))
        with trio.CancelScope(shield=True):
            await self._stop_all(run, "timed_out")
            for member in run.members:
                await self.hidden.release(member)
        run.phase, run.outcome = "done", "delivered"
        answer = expert.output() if expert is not None else ""
        if not answer.strip():
            answer = "The expert gave no answer" + (f": {run.notes[-1]}" if run.notes else ".")
        final = expert.thread_id if expert is not None and expert.provider_thread_id else None
        return delivery.help_result(answer, final, hidden_thread_ids=run.hidden_ids(expert))

    # -- gather_perspectives -----------------------------------------------------------------------------------

    async def gather(self, run: Run, phases: Phases, deliver: Deliver) -> None:
        """The detached panel: plan, panel, synthesis under the hard cap, then exactly one delivery."""
        message: str | None = None
        workers: list[Member] = []
        synthesis: Member | None = None
        reason = "the hard cap of the run was reached"
        try:
            with trio.move_on_after(self.config.hard_cap_s):
                planned = await self.plan(run, phases.planner, run.lenses)
                await self._checked(run, phases.workers)
                run.phase = "panel"
                workers = [
                    self.member(run, "worker", r, lens) for r, lens in zip(phases.workers, run.lenses, strict=True)
                ]
                panel_end = run.started_at + self.config.hard_cap_s - self.config.synthesis_s
                await self._panel(run, workers, planned, panel_end)
                await self._checked(run, [phases.planner])
                run.phase = "synthesis"
                synthesis = self.member(run, "synthesis", phases.planner)
                message = await self._synthesize(run, workers, synthesis)
                if message is None:
                    reason = synthesis.error or "the synthesis did not finish"
        except Stopped as exc:
            reason = f"a budget stopped it: {exc}"
        except Exception as exc:  # a fault of the pipeline: still one delivery, saying so
            log.exception("a perspectives run failed", run=run.run_id)
            reason = f"the run failed unexpectedly ({type(exc).__name__}: {exc})"
        with trio.CancelScope(shield=True):
            await self._stop_all(run, "timed_out")
            if message is None:
                message = self._failed(run, reason, workers, synthesis)
            run.phase = "delivering"
            try:
                with trio.fail_after(60):
                    await deliver(message)
                run.outcome = "delivered" if message.startswith(delivery.RESULT_HEAD) else "failed"
            except Exception as exc:  # logged, never a second message (the first may have arrived)
                log.error(
                    "could not deliver a perspectives result", run=run.run_id, thread=run.thread_id, error=str(exc)
                )
                run.outcome = "undelivered"
            for member in run.members:
                await self.hidden.release(member)
            run.phase = "done"

    async def _checked(self, run: Run, tuples: Sequence[Resolved]) -> None:
        """The budgets before a phase (`Stopped` when one refuses it); help's expert fails as a member would."""
        try:
            await self.check(run, tuples)
        except Stopped as exc:
            if run.tool == "help":
                raise MemberFailed(f"a budget stopped it: {exc}") from None
            raise

    async def _panel(self, run: Run, workers: list[Member], planned: Sequence[str], panel_end: float) -> None:
        """Every worker launched at once and given the whole phase; one wrap-up steer at `wrapup_s`; at the phase's
        end the unfinished are interrupted, their output kept as `partial`."""
        started = time.time()

        async def work(member: Member, expert: str) -> None:
            assert member.lens is not None
            try:
                await self.hidden.spawn(member, run.cwd, self.config.spawn_timeout_s)
                await self.hidden.prompt(member, prompts.worker_prompt(expert, run.question, run.context, member.lens))
            except MemberFailed as exc:
                log.info("a panel worker could not start", run=run.run_id, lens=member.lens, error=str(exc))
                return
            with trio.move_on_at(_at(started + self.config.wrapup_s)):
                await member.done.wait()
            if not member.done.is_set():
                await self.hidden.steer(member, prompts.wrapup_steer())
            with trio.move_on_at(_at(panel_end)):
                await member.done.wait()
            if not member.done.is_set():
                await self.hidden.interrupt(member, "partial")

        async with trio.open_nursery() as nursery:
            for member, expert in zip(workers, planned, strict=True):
                nursery.start_soon(work, member, expert)

    async def _synthesize(self, run: Run, workers: list[Member], synthesis: Member) -> str | None:
        """The synthesis over whatever evidence exists (the rest of the hard cap is its own); the delivery's text,
        or None when it did not finish (its partial text stays on the member)."""
        evidence = [prompts.Evidence(m.resolved.provider_id, m.lens or "", _status(m), m.output()) for m in workers]
        withheld = {name for m in workers for name in _names(m.resolved) if name}
        text = prompts.synthesis_prompt(
            run.question,
            run.context,
            evidence,
            anonymous=self.config.anonymous,
            withheld=withheld,
            thread_refs=[f"@{m.thread_id}" for m in workers],
        )
        try:
            await self.hidden.spawn(synthesis, run.cwd, self.config.spawn_timeout_s)
            await self.hidden.prompt(synthesis, text)
        except MemberFailed as exc:
            synthesis.error = str(exc)
            return None
        await synthesis.done.wait()  # the hard cap bounds it
        if synthesis.status != "completed":
            return None
        return delivery.panel_result(
            run.run_id,
            synthesis.output(),
            synthesis.thread_id,
            [_shown(m) for m in workers],
            hidden_thread_ids=run.hidden_ids(synthesis),
            notes=run.notes,
        )

    def _failed(self, run: Run, reason: str, workers: list[Member], synthesis: Member | None) -> str:
        raw = [prompts.Evidence(m.resolved.provider_id, m.lens or "", _status(m), m.output()) for m in workers]
        final = synthesis.thread_id if synthesis is not None and synthesis.provider_thread_id else None
        return delivery.panel_failed(
            run.run_id,
            reason,
            synthesis.output() if synthesis is not None else None,
            raw,
            [_shown(m) for m in workers],
            hidden_thread_ids=run.hidden_ids(synthesis),
            final_thread_id=final,
            notes=run.notes,
        )

    async def _stop_all(self, run: Run, status: prompts.Status) -> None:
        """Every member still working is interrupted (the hard cap, or the run's end)."""
        async with trio.open_nursery() as nursery:
            for member in run.members:
                if not member.done.is_set():
                    nursery.start_soon(self.hidden.interrupt, member, status)


# Names a member's answer may give itself away by, beyond its provider id and model id (masked for the synthesizer).
VENDOR_NAMES: Final[dict[str, tuple[str, ...]]] = {
    "claude-code": ("Claude", "Anthropic"),
    "codex": ("OpenAI", "ChatGPT", "GPT"),
}


def _names(resolved: Resolved) -> list[str]:
    """A member's provider id and model, the vendor names of a known provider, an ACP provider's agent (`acp-gemini`:
    Gemini) and a model's last path segment when it is distinctive (`scripted/scripted-model`: `scripted-model`, not
    `pi/first`'s `first`, which would mask an ordinary word)."""
    provider, model = resolved.provider_id, resolved.model
    names = [provider, *VENDOR_NAMES.get(provider, ())]
    if provider.startswith("acp-"):
        names.append(provider.removeprefix("acp-"))
    if model:
        names.append(model)
        tail = model.rsplit("/", 1)[-1]
        if tail != model and any(c.isdigit() or c in "-._" for c in tail):
            names.append(tail)
    return names


def _at(wall: float) -> float:
    """A wall-clock deadline as a trio deadline."""
    return trio.current_time() + max(0.0, wall - time.time())


def _status(member: Member) -> prompts.Status:
    status = member.status
    return "failed" if status == "pending" or status == "running" else status


def _shown(member: Member) -> delivery.Member:
    return delivery.Member(member.lens or "", member.resolved.provider_id, member.resolved.model, _status(member))
