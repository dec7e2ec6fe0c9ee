"""The usage ledger and the budgets in the daemon's client API (issue 49), as msgspec types: the daemon decodes
their params with them, `bbridge.wire.openrpc` describes them and both clients call them typed.

* `usage/summary {groupBy?, since?, until?}` → `UsageSummaryResult`: the booked turns' tokens summed by the keys
  of `groupBy` (`provider`, `model`, `thread`, `client`, `day`, `run`), one row per combination, with `usd` when
  `[pricing."MODEL"]` prices a model in it; `since`/`until` (seconds since the epoch) bound when a turn was booked.
* `budgets/check {threadId?, providerId?, model?, runId?}` → `BudgetsCheckResult`: the `[[budgets]]` checked as a
  `turn/start` with those attributes is (a Perspectives run asks before it launches and between its phases). A
  `deny` budget, or an `ask` whose approval was declined, refuses it with `BUDGET_EXCEEDED` (`-32023`) and a
  `BudgetRefusal` as the error's `data`; a `warn` budget lets it through, named in `warned`.

`BudgetState` is a budget as `daemon/status` shows it (`budgets`), and `Spend` an amount in tokens and/or USD.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from bbridge.core.scalars import NonEmpty, Wire

UsageGroup = Literal["provider", "model", "thread", "client", "day", "run"]
USAGE_GROUPS: tuple[UsageGroup, ...] = ("provider", "model", "thread", "client", "day", "run")
BudgetScope = Literal["all", "provider", "model", "thread", "client", "run"]
BudgetWindow = Literal["1h", "1d", "7d", "30d", "thread", "run"]
BudgetAction = Literal["deny", "ask", "warn"]


class UsageSummaryParams(Wire, kw_only=True, forbid_unknown_fields=True):
    """The keys to group by (none: one row of totals) and the booking times to count (`since` ≤ at < `until`)."""

    groupBy: list[UsageGroup] = msgspec.field(default_factory=list)
    since: float | UnsetType = UNSET
    until: float | UnsetType = UNSET


class UsageRow(Wire, kw_only=True):
    """One combination of the grouped keys (a key not grouped by is absent; null: not known, e.g. a thread whose
    model no construction or turn named) and its booked turns' tokens."""

    provider: str | UnsetType | None = UNSET
    model: str | UnsetType | None = UNSET
    thread: str | UnsetType | None = UNSET
    client: str | UnsetType | None = UNSET  # what the client that started the turn called itself
    day: str | UnsetType | None = UNSET  # the UTC day a turn was booked, YYYY-MM-DD
    run: str | UnsetType | None = UNSET  # the Perspectives run of a hidden thread
    inputTokens: int
    cachedInputTokens: int
    outputTokens: int
    reasoningOutputTokens: int
    totalTokens: int
    turns: int
    usd: float | UnsetType = UNSET  # its priced models' cost ([pricing."MODEL"]); a model without a price adds none


class UsageSummaryResult(Wire, kw_only=True):
    rows: list[UsageRow]


class Spend(Wire, kw_only=True):
    """An amount: tokens (all of a turn's `totalTokens`) and/or US dollars (by `[pricing."MODEL"]`)."""

    tokens: int | UnsetType = UNSET
    usd: float | UnsetType = UNSET


class BudgetRefusal(Wire, kw_only=True):
    """Why a request was refused (a `BUDGET_EXCEEDED` error's `data`), or what an `ask` budget asks about (beside its
    approval's payload): the budget, what was spent in its window and its limit."""

    budget: str
    spent: Spend
    limit: Spend
    window: BudgetWindow


class BudgetState(Wire, kw_only=True):
    """A `[[budgets]]` entry and what is spent against it now: for a budget kept per key (a scope other than `all`,
    or a `thread` or `run` window) the key nearest its limit (`key`), null when nothing was spent."""

    name: str
    scope: BudgetScope
    match: str
    window: BudgetWindow
    action: BudgetAction
    spent: Spend
    limit: Spend
    key: str | None = None


class BudgetsCheckParams(Wire, kw_only=True, forbid_unknown_fields=True):
    """A request's attributes, as a `turn/start` with them would be checked: the thread (its provider, model and
    run follow from its record when not given), the provider, the model and the Perspectives run. With `threadId`, a
    `warn` budget's `system/warning` goes on that thread."""

    threadId: NonEmpty | UnsetType = UNSET
    providerId: NonEmpty | UnsetType = UNSET
    model: NonEmpty | UnsetType = UNSET
    runId: NonEmpty | UnsetType = UNSET


class BudgetsCheckResult(Wire, kw_only=True):
    """Allowed (a refusal is the `BUDGET_EXCEEDED` error); `warned`: the `warn` budgets it went past."""

    allowed: Literal[True]
    warned: list[BudgetRefusal] = msgspec.field(default_factory=list)
