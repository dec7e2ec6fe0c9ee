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

What is booked is summed (`tally.Tally`): by minute, hour and day as it ages, and over all time per thread and per
run, so the ledger's memory grows with the threads and hours it has seen, not its turns. With `--journal` each
booking is also appended to `usage/ledger.ndjson` in its directory (its turn id with it, and the thread's latest
`total` for the repeat rule), read back at start and rewritten as the sums when it has grown; without it the sums
are in memory only.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bbridge.core.events import Event
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.tally import ZERO, Sum, Tally, Tokens, breakdown, plus, uncached
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.usage_config import Pricing

USAGE: Final = "thread/tokenUsage/updated"
OBSERVED_TYPES: Final = frozenset({USAGE, "turn/input/accepted", "turn/completed", "provider/modelFallback"})
LEDGER_FILE: Final = Path("usage") / "ledger.ndjson"  # in the journal's directory: no thread's file is named so
SETTLED_KEPT: Final = 8  # a thread's last booked turns, for a late usage event's addendum


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


class Ledger:
    """What each thread's turns spent, booked into the sums as each turn ends, and each open turn's usage so far."""

    def __init__(
        self,
        registry: ThreadRegistry,
        inputs: Inputs,
        directory: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._inputs = inputs
        self._clock = clock
        self.tally = Tally(None if directory is None else directory / LEDGER_FILE, clock)
        self._threads: defaultdict[str, _Thread] = defaultdict(_Thread)
        self._open: dict[tuple[str, str | None], _Open] = {}
        self.tally.read_back()
        for thread_id, mark in self.tally.marks.items():
            self._threads[thread_id].mark = mark

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
        total, last = breakdown(usage.get("total")), breakdown(usage.get("last"))
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
        opened.tokens = plus(opened.tokens, added)

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
        keys = (thread_id, provider, self.model_of(thread_id), self._client(thread_id, request), self._run(thread_id))
        self.tally.add(self._clock(), keys, tokens, turns, turn, self._threads[thread_id].mark)

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
        """`usage/summary`'s rows (`Tally.summary`)."""
        return self.tally.summary(group_by, since, until, pricing)

    def spending(self, since: float | None = None, thread: str | None = None, run: str | None = None) -> Iterator[Sum]:
        """The sums a budget counts, each turn still open among them as a sum of now: those ending after `since`, or
        those of one thread, or of one run, over all time."""
        if thread is not None:
            yield from self.tally.of_thread(thread)
        elif run is not None:
            yield from self.tally.of_run(run)
        else:
            yield from self.tally.since(since)
        now = self._clock()
        for (thread_id, turn), opened in self._open.items():
            if (thread is None or thread_id == thread) and (run is None or self._run(thread_id) == run):
                request = self._threads[thread_id].requests.get(turn)
                keys = (thread_id, opened.provider, self.model_of(thread_id), self._client(thread_id, request),
                        self._run(thread_id))  # fmt: skip
                yield Sum(now, 0.0, *keys, opened.tokens, uncached(opened.tokens))
