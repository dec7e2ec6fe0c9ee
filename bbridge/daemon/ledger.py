"""The usage ledger (issue 49): each turn's tokens, booked once, against its thread, provider, model, the client that
started it, the day and its Perspectives run; `usage/summary` sums the bookings, the budgets (`budgets.py`) read them.

What a turn spent comes from its `thread/tokenUsage/updated` events, which the compiled delivery notices by type (a
set lookup it makes for every event anyway; `delivery._LIFECYCLE`), so no delta costs anything more. Every bridge
reports two breakdowns (assembler.md §11.1, forwarded verbatim): `last`, what the provider's last request (codex),
prompt (ACP), result (Claude Code) or run (pi) used, and `total`, the thread's running sum of those, which restarts
at zero with a new provider session (Claude Code and pi after a resume) or starts from another thread's (a codex
fork). Neither alone is a turn's spend: a turn of codex reports many `last`s, one per request; a `total` cannot be
differenced across a reset or a fork. The rule, for each usage event of thread T in turn U:

* it adds its `last` to U's tokens, unless its `total` equals the `total` of T's previous usage event: then it is
  a repeat and adds nothing (codex reports its unchanged counter again, e.g. after a compaction with `last` its new
  context size; Claude Code after a `/compact` with `last` all zero);
* U is booked once, at its `turn/completed` (a bridge exit's settlement too), with what its events added — zero
  for a turn whose usage was only a repeat. A turn that reported no usage is not booked. A usage event that comes
  after its turn was booked (scoped to the last turn, assembler.md §11.1) is booked on its own as an addendum to it
  (`turns: 0`), and at shutdown every turn still open is booked with what it has so far.

Tested against what the recorded sessions report (tests/test_usage_ledger.py). The model is the thread's latest
construction's or turn's `options.model`, else the fallback a `provider/modelFallback` named, else unknown; the
client is the one whose input the turn accepted first (`thread/inputs`), by what it called itself in `initialize`.

With `--journal` the bookings are appended to `usage/ledger.ndjson` in its directory and read back at start (a
thread's latest `total` with them, for the repeat rule); without it they are kept in memory only.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import structlog

from bbridge.core.events import Event
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.journal import append_record, read_records
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.usage_config import Pricing

log = structlog.get_logger("bbridge.daemon.ledger")

USAGE: Final = "thread/tokenUsage/updated"
OBSERVED_TYPES: Final = frozenset({USAGE, "turn/input/accepted", "turn/completed", "provider/modelFallback"})
BREAKDOWN: Final = ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
KINDS: Final = ("inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens", "totalTokens")
LEDGER_FILE: Final = Path("usage") / "ledger.ndjson"  # in the journal's directory: no thread's file is named so
SETTLED_KEPT: Final = 8  # a thread's last booked turns, for a late usage event's addendum

Tokens = tuple[int, int, int, int, int]  # a breakdown in `BREAKDOWN` order
ZERO: Final[Tokens] = (0, 0, 0, 0, 0)


@dataclass(slots=True)
class Booking:
    """One turn booked (or an addendum to one, `turns` 0), with what it is summed by."""

    at: float  # when it was booked, seconds since the epoch
    thread: str
    turn: str | None
    provider: str
    model: str | None
    client: str | None
    run: str | None
    tokens: Tokens
    turns: int = 1

    @property
    def day(self) -> str:
        return datetime.fromtimestamp(self.at, UTC).date().isoformat()

    def key(self, group: str) -> str | None:
        value: str | None = self.day if group == "day" else getattr(self, group)
        return value

    def usd(self, pricing: Pricing) -> float | None:
        """What its tokens cost at the model's price (None: no price); input not from the cache is what the
        breakdown's `totalTokens` holds beyond the cached input and the output (every bridge's total counts both)."""
        price = pricing.price(self.model)
        if price is None:
            return None
        total, _, cached, output, _ = self.tokens
        return price.usd(max(0, total - cached - output), cached, output)

    def record(self, mark: Tokens | None) -> dict[str, Any]:
        named = dict(zip(BREAKDOWN, self.tokens, strict=True))
        return {
            "at": self.at,
            "threadId": self.thread,
            "turnId": self.turn,
            "providerId": self.provider,
            "model": self.model,
            "client": self.client,
            "runId": self.run,
            **{kind: named[kind] for kind in KINDS},
            "turns": self.turns,
            "mark": None if mark is None else list(mark),
        }


@dataclass(slots=True)
class _Open:
    """A turn's usage so far."""

    provider: str
    tokens: Tokens = ZERO


@dataclass
class _Thread:
    mark: Tokens | None = None  # the `total` of its latest usage event
    reported_model: str | None = None  # a `provider/modelFallback`'s fallback
    requests: dict[str | None, str] = field(default_factory=dict)  # each open turn's first accepted input's id
    settled: deque[str | None] = field(default_factory=lambda: deque(maxlen=SETTLED_KEPT))
    booked: list[Booking] = field(default_factory=list)


class Ledger:
    """The bookings, in the order they were made, and each open turn's usage so far."""

    def __init__(
        self,
        registry: ThreadRegistry,
        inputs: Inputs,
        directory: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._inputs = inputs
        self._path = None if directory is None else directory / LEDGER_FILE
        self._clock = clock
        self.booked: list[Booking] = []
        self._threads: defaultdict[str, _Thread] = defaultdict(_Thread)
        self._runs: defaultdict[str, list[Booking]] = defaultdict(list)
        self._open: dict[tuple[str, str | None], _Open] = {}
        self.read_back()

    # -- what the delivery noticed ---------------------------------------------------------------------------

    def observe(self, provider_id: str, thread_id: str, event: Event) -> None:
        """One noticed event of `OBSERVED_TYPES` (a bridge's, through its delivery, or one the daemon made)."""
        kind = event["type"]
        scope = event.get("scope") or {}
        turn = scope.get("turnId") if isinstance(scope, dict) else None
        thread = self._threads[thread_id]
        if kind == USAGE:
            self._usage(provider_id, thread_id, thread, turn, event.get("tokenUsage"))
        elif kind == "turn/input/accepted":
            request = event.get("clientRequestId")
            if isinstance(request, str):
                thread.requests.setdefault(turn, request)
        elif kind == "turn/completed":
            request = thread.requests.pop(turn, None)
            opened = self._open.pop((thread_id, turn), None)
            thread.settled.append(turn)
            if opened is not None:
                self._book(thread_id, turn, opened.provider, opened.tokens, request)
        elif kind == "provider/modelFallback" and isinstance(model := event.get("fallbackModel"), str):
            thread.reported_model = model

    def published(self, thread_id: str, provider_id: str, events: Iterable[Event]) -> None:
        """Events the daemon made (a dead bridge's settlement): its `turn/completed`s book their turns."""
        for event in events:
            if event["type"] in OBSERVED_TYPES:
                self.observe(provider_id, thread_id, event)

    def _usage(self, provider_id: str, thread_id: str, thread: _Thread, turn: str | None, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        total, last = _breakdown(usage.get("total")), _breakdown(usage.get("last"))
        if total is None or last is None:
            return
        added = ZERO if total == thread.mark else last
        thread.mark = total
        opened = self._open.get((thread_id, turn))
        if opened is None and turn in thread.settled:  # its turn was booked: an addendum of its own
            if added != ZERO:
                self._book(thread_id, turn, provider_id, added, thread.requests.get(turn), turns=0)
            return
        if opened is None:
            opened = self._open[(thread_id, turn)] = _Open(provider_id)
        opened.tokens = _plus(opened.tokens, added)

    def close(self) -> None:
        """Shutdown: every open turn booked with what it has so far."""
        for (thread_id, turn), opened in list(self._open.items()):
            request = self._threads[thread_id].requests.pop(turn, None)
            self._book(thread_id, turn, opened.provider, opened.tokens, request)
        self._open.clear()

    # -- booking -----------------------------------------------------------------------------------------------

    def _book(
        self, thread_id: str, turn: str | None, provider: str, tokens: Tokens, request: str | None, turns: int = 1
    ) -> None:
        booking = Booking(
            self._clock(), thread_id, turn, provider, self.model_of(thread_id), self._client(thread_id, request),
            self._run(thread_id), tokens, turns,
        )  # fmt: skip
        self._keep(booking)
        if self._path is not None:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                append_record(self._path, booking.record(self._threads[thread_id].mark))
            except OSError as exc:
                log.warning("could not journal a usage booking", threadId=thread_id, error=str(exc))

    def _keep(self, booking: Booking) -> None:
        self.booked.append(booking)
        self._threads[booking.thread].booked.append(booking)
        if booking.run is not None:
            self._runs[booking.run].append(booking)

    def read_back(self) -> None:
        """A restart: the journaled bookings (a malformed line skipped), and each thread's latest `total`."""
        if self._path is None:
            return
        for record in read_records(self._path, 1 << 62):
            booking = _booking(record)
            if booking is None:
                continue
            self._keep(booking)
            mark = _breakdown(dict(zip(BREAKDOWN, record.get("mark") or (), strict=False)))
            if mark is not None:
                self._threads[booking.thread].mark = mark

    # -- what a booking is booked against ------------------------------------------------------------------------

    def model_of(self, thread_id: str) -> str | None:
        """The thread's latest construction's or turn's `options.model`, else the fallback a bridge reported."""
        record = self._registry.get(thread_id)
        model = (record.options or {}).get("model") if record is not None else None
        if isinstance(model, str) and model:
            return model
        thread = self._threads.get(thread_id)
        return None if thread is None else thread.reported_model

    def _client(self, thread_id: str, request: str | None) -> str | None:
        client = self._inputs.client_of(thread_id, request)
        if client is None and request is not None:
            client = self._inputs.client_of(thread_id, None)
        return None if client is None else client.get("name") or client.get("connection")

    def _run(self, thread_id: str) -> str | None:
        hidden = self._registry.hidden_of(thread_id)
        return None if hidden is None else hidden.runId

    # -- reading -------------------------------------------------------------------------------------------------

    def summary(
        self, group_by: Sequence[str], since: float | None, until: float | None, pricing: Pricing
    ) -> list[dict[str, Any]]:
        """`usage/summary`'s rows: the bookings made in [since, until) summed by the `group_by` keys, sorted."""
        sums: dict[tuple[str | None, ...], list[Any]] = {}
        for booking in self.booked:
            if (since is not None and booking.at < since) or (until is not None and booking.at >= until):
                continue
            key = tuple(booking.key(group) for group in group_by)
            sum_ = sums.setdefault(key, [ZERO, 0, None])
            sum_[0] = _plus(sum_[0], booking.tokens)
            sum_[1] += booking.turns
            usd = booking.usd(pricing)
            if usd is not None:
                sum_[2] = (sum_[2] or 0.0) + usd
        if not group_by and not sums:
            sums[()] = [ZERO, 0, None]
        rows = []
        for key, (tokens, turns, usd) in sorted(sums.items(), key=lambda item: [k or "" for k in item[0]]):
            named = dict(zip(BREAKDOWN, tokens, strict=True))
            row: dict[str, Any] = dict(zip(group_by, key, strict=True))
            row |= {kind: named[kind] for kind in KINDS}
            row["turns"] = turns
            if usd is not None:
                row["usd"] = round(usd, 6)
            rows.append(row)
        return rows

    def spending(
        self, since: float | None = None, thread: str | None = None, run: str | None = None
    ) -> Iterator[Booking]:
        """The bookings a budget counts, each turn still open among them as booked now: those made since `since`,
        or those of one thread, or of one run."""
        if thread is not None:
            yield from self._threads[thread].booked if thread in self._threads else ()
        elif run is not None:
            yield from self._runs.get(run, ())
        else:
            for booking in reversed(self.booked):  # newest first: a rolling window stops at its start
                if since is not None and booking.at < since:
                    break
                yield booking
        now = self._clock()
        for (thread_id, turn), opened in self._open.items():
            if (thread is None or thread_id == thread) and (run is None or self._run(thread_id) == run):
                request = self._threads[thread_id].requests.get(turn)
                yield Booking(
                    now, thread_id, turn, opened.provider, self.model_of(thread_id),
                    self._client(thread_id, request), self._run(thread_id), opened.tokens, 0,
                )  # fmt: skip


def _breakdown(value: Any) -> Tokens | None:
    """A token breakdown (a dict, or the grammar's `TokenBreakdown` as a live event carries it) as five integers."""
    if value is None:
        return None
    found: list[Any] = [
        value.get(name) if isinstance(value, dict) else getattr(value, name, None) for name in BREAKDOWN
    ]
    numbers = [int(n) for n in found if isinstance(n, (int, float)) and not isinstance(n, bool)]
    if len(numbers) != len(BREAKDOWN):
        return None
    return (numbers[0], numbers[1], numbers[2], numbers[3], numbers[4])


def _plus(a: Tokens, b: Tokens) -> Tokens:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


def _booking(record: dict[str, Any]) -> Booking | None:
    """A journaled booking, or None when the line is not one."""
    tokens = _breakdown(record)
    at, thread, provider = record.get("at"), record.get("threadId"), record.get("providerId")
    if (
        tokens is None
        or not isinstance(at, (int, float))
        or not isinstance(thread, str)
        or not isinstance(provider, str)
    ):
        return None
    optional = [record.get(name) for name in ("turnId", "model", "client", "runId")]
    turn, model, client, run = (value if isinstance(value, str) else None for value in optional)
    turns = record.get("turns")
    return Booking(float(at), thread, turn, provider, model, client, run, tokens, turns if turns in (0, 1) else 1)
