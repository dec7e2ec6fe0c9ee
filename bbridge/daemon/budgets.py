"""Budgets across providers (issue 49): the `[[budgets]]` of `bbridge.toml`, checked against the usage ledger before
every `turn/start` and `turn/steer` (`methods.TurnInput.prepare`) and when a room asks (`budgets/check`: a
Perspectives run before it launches and between its phases).

A budget covers a request whose scope key (its provider, model, thread, client or run; `all` has none) matches its
`match` glob, and is kept per key: `scope = "provider", match = "*"` gives every provider a limit of its own. What
it has spent is the tokens (every booking's `totalTokens`) and, with `usd`, their cost (`[pricing."MODEL"]`; a model
without a price costs nothing) of the ledger's sums with the request's key in its window: the last hour, day, 7 or
30 days (rolling: to the minute for an hour, to the hour for the longer ones, never less, `tally.py`), the request's
thread, or its run. The turns still running count as booked now (`Ledger.spending`).
A budget is past its limit when either amount has reached it; a request is checked before it starts, so a turn
already running is never cut off.

Past its limit, `deny` refuses the request (`BUDGET_EXCEEDED`, naming the budget, what was spent and the limit, with
a `BudgetRefusal` as `data`); `ask` opens a pending approval as a hosted tool's call does (any client answers it,
the page and `bbridge respond` included; the provider's `interaction_timeout_s` declines it, connected clients or
not, since a request waits on it) and the request goes on only when allowed: `allow_for_session` keeps the allowance
for the thread, and any allow of a request with a run for that run (its later phases and hidden threads are not
asked again); `warn` lets it through with a `system/warning` on the thread. Deny budgets are checked first, then
asks, then warns, each in the file's order. With `--journal`, an allowance is appended to `usage/allowances.ndjson`
in its directory and read back at start (the newest `ALLOWANCES_KEPT`), so a restart does not ask again what was
allowed for a thread or a run.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import structlog

from bbridge.core.events import Event
from bbridge.daemon.journal import append_record, read_records
from bbridge.daemon.ledger import Ledger
from bbridge.daemon.tally import Sum
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.usage_config import WINDOW_S, Budget, UsageConfig
from bbridge.seams.tool_host import Approval
from bbridge.wire import errors, rpc
from bbridge.wire.usage import BudgetRefusal, Spend

Ask = Callable[[str, str | None, str, str, dict[str, Any]], Awaitable[Approval]]
"""`Relays.ask_budget`: (provider, thread, the request's method, reason, the `BudgetRefusal`) → the answer."""
Publish = Callable[[str, str, list[Event]], None]
"""`Fanout.publish`: daemon-made events on a thread (thread, provider, events)."""

WINDOW_WORDS: Final = {
    "1h": "in the last hour",
    "1d": "in the last day",
    "7d": "in the last 7 days",
    "30d": "in the last 30 days",
    "thread": "on this thread",
    "run": "in this Perspectives run",
}
NO_PROVIDER: Final = "daemon"  # the pending approval of a check that names neither a thread nor a provider
ALLOWANCES_FILE: Final = Path("usage") / "allowances.ndjson"  # in the journal's directory
ALLOWANCES_KEPT: Final = 10_000  # the newest, read back (a file past twice that is cut to it)

log = structlog.get_logger("bbridge.daemon.budgets")


@dataclass(frozen=True)
class Request:
    """What a budget reads of a request: its method and the keys a scope may name (None: not known)."""

    method: str
    thread: str | None
    provider: str | None
    model: str | None
    client: str | None
    run: str | None

    def key(self, scope: str) -> str | None:
        value: str | None = None if scope == "all" else getattr(self, scope)
        return value


class Budgets:
    """The configured budgets, what each has spent (from the ledger), and the allowances `ask` answers gave."""

    def __init__(
        self,
        config: UsageConfig,
        ledger: Ledger,
        registry: ThreadRegistry,
        ask: Ask,
        publish: Publish,
        directory: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.budgets = config.budgets
        self._pricing = config.pricing
        self._ledger = ledger
        self._registry = registry
        self._ask = ask
        self._publish = publish
        self._clock = clock
        self._allowed: set[tuple[str, str, str]] = set()  # (budget, "thread" | "run", its id)
        self._path = None if directory is None else directory / ALLOWANCES_FILE
        if self._path is not None:
            for record in read_records(self._path, ALLOWANCES_KEPT, trim=True):
                budget, kind, owner = record.get("budget"), record.get("for"), record.get("id")
                if isinstance(budget, str) and kind in ("thread", "run") and isinstance(owner, str):
                    self._allowed.add((budget, kind, owner))

    def request(
        self,
        method: str,
        thread: str | None,
        provider: str | None = None,
        model: str | None = None,
        client: str | None = None,
        run: str | None = None,
    ) -> Request:
        """A request's keys, what is not given taken from its thread: its provider, model and run."""
        if thread is not None:
            provider = provider or self._registry.provider_of(thread)
            model = model or self._ledger.model_of(thread)
            hidden = self._registry.hidden_of(thread)
            run = run or (hidden.runId if hidden is not None else None)
        return Request(method, thread, provider, model, client, run)

    async def gate(self, request: Request) -> list[BudgetRefusal]:
        """Raises `BUDGET_EXCEEDED` for a `deny` budget past its limit or an `ask` one declined; the `warn` budgets
        past theirs, each said on the request's thread, are returned."""
        if not self.budgets:
            return []
        over = [(budget, refusal) for budget in self.budgets if (refusal := self._over(budget, request)) is not None]
        for budget, refusal in over:
            if budget.action == "deny":
                raise _refused(budget, refusal, request, "")
        for budget, refusal in over:
            if budget.action == "ask" and not self._allows(budget, request):
                await self._asked(budget, refusal, request)
        warned = [refusal for budget, refusal in over if budget.action == "warn"]
        for refusal in warned:
            self._warn(refusal, request)
        return warned

    def status(self) -> list[dict[str, Any]]:
        """`daemon/status`'s `budgets`: each with what its key nearest the limit has spent."""
        now = self._clock()
        states = []
        for budget in self.budgets:
            spent: dict[str | None, list[Any]] = {}
            for sum_ in self._source(budget, None, now, every=True):
                key = _group(budget, sum_)
                if key is not _OUT:
                    sums = spent.setdefault(key, [0, 0.0])
                    sums[0] += sum_.tokens[0]
                    if budget.usd is not None:
                        sums[1] += sum_.usd(self._pricing) or 0.0
            nearest = max(spent.items(), key=lambda item: _ratio(budget, item[1]), default=(None, [0, 0.0]))
            state = {
                "name": budget.name,
                "scope": budget.scope,
                "match": budget.match,
                "window": budget.window,
                "action": budget.action,
                "spent": _spend(budget, *nearest[1]),
                "limit": _limit(budget),
                "key": nearest[0],
            }
            states.append(state)
        return states

    # -- one budget against one request -------------------------------------------------------------------------

    def _over(self, budget: Budget, request: Request) -> BudgetRefusal | None:
        """The refusal to give when the request is the budget's and the budget is past its limit, else None."""
        key = request.key(budget.scope)
        if not budget.covers(key):
            return None
        if (budget.window == "thread" and request.thread is None) or (budget.window == "run" and request.run is None):
            return None
        tokens, usd = 0, 0.0
        for sum_ in self._source(budget, request, self._clock()):
            if budget.scope == "all" or sum_.key(budget.scope) == key:
                tokens += sum_.tokens[0]
                if budget.usd is not None:
                    usd += sum_.usd(self._pricing) or 0.0
        if _ratio(budget, [tokens, usd]) < 1:
            return None
        return BudgetRefusal(budget=budget.name, spent=_spend(budget, tokens, usd), limit=_limit(budget),
                             window=budget.window)  # fmt: skip

    def _source(self, budget: Budget, request: Request | None, now: float, every: bool = False) -> Iterable[Sum]:
        """The sums in the budget's window: the request's thread's or run's, or (`every`) all of them."""
        if budget.window in WINDOW_S:
            return self._ledger.spending(since=now - WINDOW_S[budget.window])
        if every or request is None:
            return self._ledger.spending()
        if budget.window == "thread":
            return self._ledger.spending(thread=request.thread)
        return self._ledger.spending(run=request.run)

    def _allows(self, budget: Budget, request: Request) -> bool:
        return (request.thread is not None and (budget.name, "thread", request.thread) in self._allowed) or (
            request.run is not None and (budget.name, "run", request.run) in self._allowed
        )

    async def _asked(self, budget: Budget, refusal: BudgetRefusal, request: Request) -> None:
        """The budget's approval, asked and waited for: a deny (or no answer) refuses the request."""
        provider = request.provider or NO_PROVIDER
        reason = f"{_said(budget, refusal, request)}. Allow this {request.method} anyway?"
        approval = await self._ask(provider, request.thread, request.method, reason, msgspec.to_builtins(refusal))
        if approval.decision == "deny":
            by = "no answer in time" if approval.by == "daemon:timeout" else f"by {approval.by}"
            raise _refused(budget, refusal, request, f": its approval was declined ({by})")
        if request.run is not None:
            self._allow(budget.name, "run", request.run)
        if approval.decision == "allow_for_session" and request.thread is not None:
            self._allow(budget.name, "thread", request.thread)

    def _allow(self, budget: str, kind: str, owner: str) -> None:
        """An allowance kept (and journaled) for the budget on the thread or the run."""
        if (budget, kind, owner) in self._allowed:
            return
        self._allowed.add((budget, kind, owner))
        if self._path is not None:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                append_record(self._path, {"budget": budget, "for": kind, "id": owner})
            except OSError as exc:
                log.warning("could not journal a budget allowance; it holds until the daemon stops", budget=budget,
                            error=str(exc))  # fmt: skip

    def _warn(self, refusal: BudgetRefusal, request: Request) -> None:
        """A `system/warning` on the request's thread (none without a thread)."""
        budget = next(b for b in self.budgets if b.name == refusal.budget)
        if request.thread is None:
            return
        provider = request.provider or self._registry.provider_of(request.thread) or NO_PROVIDER
        warning: Event = {"type": "system/warning", "threadId": request.thread, "scope": {"kind": "thread"}}
        warning["code"] = "budget_exceeded"
        warning["message"] = f"{_said(budget, refusal, request)}; {request.method} let through (action warn)"
        warning["details"] = msgspec.to_builtins(refusal)
        self._publish(request.thread, provider, [warning])


_OUT: Final[Any] = object()  # a sum outside a budget's scope


def _group(budget: Budget, sum_: Sum) -> Any:
    """The key a sum counts under for `daemon/status` (its scope key, and its thread or run for those
    windows), or `_OUT`."""
    parts: list[str] = []
    if budget.scope != "all":
        key = sum_.key(budget.scope)
        if not budget.covers(key):
            return _OUT
        parts.append(str(key))
    if budget.window in ("thread", "run"):
        owner = sum_.thread if budget.window == "thread" else sum_.run
        if owner is None:
            return _OUT
        parts.append(owner)
    return " ".join(parts) if parts else None


def _ratio(budget: Budget, sums: list[Any]) -> float:
    """How far along its limit the amounts are (1: reached)."""
    ratios: list[float] = [sums[0] / budget.tokens] if budget.tokens is not None else []
    if budget.usd is not None:
        ratios.append(sums[1] / budget.usd)
    return max(ratios)


def _spend(budget: Budget, tokens: int, usd: float) -> Spend:
    return Spend(tokens=tokens, usd=round(usd, 6)) if budget.usd is not None else Spend(tokens=tokens)


def _limit(budget: Budget) -> Spend:
    if budget.tokens is not None and budget.usd is not None:
        return Spend(tokens=budget.tokens, usd=budget.usd)
    return Spend(tokens=budget.tokens) if budget.tokens is not None else Spend(usd=budget.usd or 0.0)


def _said(budget: Budget, refusal: BudgetRefusal, request: Request) -> str:
    """`Budget "daily-all" is spent: 2134000 of 2000000 tokens in the last day`."""
    amounts = []
    if budget.tokens is not None:
        amounts.append(f"{refusal.spent.tokens} of {budget.tokens} tokens")
    if budget.usd is not None:
        amounts.append(f"${refusal.spent.usd:.2f} of ${budget.usd:.2f}")
    key = request.key(budget.scope)
    whose = f" for {budget.scope} {key}" if key is not None else ""
    return f'Budget "{budget.name}" is spent{whose}: {" and ".join(amounts)} {WINDOW_WORDS[budget.window]}'


def _refused(budget: Budget, refusal: BudgetRefusal, request: Request, why: str) -> rpc.RpcError:
    message = f"{_said(budget, refusal, request)}; {request.method} refused{why}"
    return rpc.RpcError(errors.BUDGET_EXCEEDED, message, msgspec.to_builtins(refusal))
