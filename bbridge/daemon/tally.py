"""The usage ledger's sums (issue 49): every booking (a turn's tokens, `ledger.Ledger`) added to the sum of its keys
over a span of time that widens as it ages, so what the ledger keeps grows with the threads and hours it has seen,
not with its turns.

A booking is added to its minute's sum (one per thread, provider, model, client and run). The sums are folded as they
age, at most once a minute, when a booking is made: a minute's into its hour once that hour ended over an hour ago, an
hour's into its day once that day ended over 30 days (the longest rolling window) ago. So

* a rolling budget window counts the sums whose span ends inside it: exact to the minute for `1h`, to the hour for
  `1d`, `7d` and `30d` (never less than the window holds, at most a minute or an hour more: a budget errs on the safe
  side);
* `usage/summary` counts the sums whose span starts in [since, until): to the minute for the last hour or two, to the
  hour for the last 30 days, to the day before (periods side by side never count a booking twice);
* a thread's and a run's budgets read sums kept per thread and per run over all time, which never fold;
* a booking made while the clock was set ahead counts in every rolling window until the clock passes it again.

With `--journal`, each booking is appended to `usage/ledger.ndjson` as it is made, its turn id with it; at start the
file is read back, and it is rewritten as the sums (and each thread's latest running total, the repeat rule's mark)
whenever it holds more than twice as many lines, checked at start and after sums were folded, so it does not grow
with turns either (replaced whole, synced first: a crash leaves the old file or the new). A line that is not a
booking, a sum or a mark (torn, or with numbers out of range) is skipped. Without it, the sums are in memory only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeGuard

import structlog

from bbridge.daemon.journal import append_record, read_records, replace_records
from bbridge.daemon.usage_config import WINDOW_S, Pricing

log = structlog.get_logger("bbridge.daemon.tally")

BREAKDOWN: Final = ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
KINDS: Final = ("inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens", "totalTokens")
MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 86400.0
HOURS_KEPT_S: Final = max(WINDOW_S.values())  # hours are folded into days only past the longest rolling window
EPOCH_RANGE: Final = (0.0, 253402300799.0)  # a booking's time read back: 1970 to the end of year 9999 (a UTC day)

Tokens = tuple[int, int, int, int, int]  # a breakdown in `BREAKDOWN` order
ZERO: Final[Tokens] = (0, 0, 0, 0, 0)
Keys = tuple[str, str, str | None, str | None, str | None]  # thread, provider, model, client, run


def plus(a: Tokens, b: Tokens) -> Tokens:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


def uncached(tokens: Tokens) -> int:
    """The input not read from the cache: what `totalTokens` holds beyond the cached input and the output (every
    bridge's total counts both)."""
    total, _, cached, output, _ = tokens
    return max(0, total - cached - output)


def breakdown(value: Any) -> Tokens | None:
    """A token breakdown (a dict, or the grammar's `TokenBreakdown` as a live event carries it) as five integers."""
    if value is None:
        return None
    found: list[Any] = [
        value.get(name) if isinstance(value, dict) else getattr(value, name, None) for name in BREAKDOWN
    ]
    numbers = [int(n) for n in found if _finite(n)]
    if len(numbers) != len(BREAKDOWN):
        return None
    return (numbers[0], numbers[1], numbers[2], numbers[3], numbers[4])


@dataclass(slots=True)
class Sum:
    """Bookings with the same keys over `span` seconds from `start` (0: one moment, a turn still open; `inf`: all
    time, a thread's or a run's)."""

    start: float
    span: float
    thread: str
    provider: str
    model: str | None
    client: str | None
    run: str | None
    tokens: Tokens = ZERO
    uncached: int = 0  # the sum of each booking's `uncached` input (priced per booking: the cut at zero is not linear)
    turns: int = 0

    @property
    def end(self) -> float:
        return self.start + self.span

    @property
    def keys(self) -> Keys:
        return (self.thread, self.provider, self.model, self.client, self.run)

    def key(self, group: str) -> str | None:
        """Its key for a `usage/summary` group or a budget's scope (`day`: the UTC day its span starts in)."""
        if group == "day":
            return datetime.fromtimestamp(self.start, UTC).date().isoformat()
        value: str | None = getattr(self, group)
        return value

    def usd(self, pricing: Pricing) -> float | None:
        """What its tokens cost at the model's price (None: no price)."""
        price = pricing.price(self.model)
        if price is None:
            return None
        return price.usd(self.uncached, self.tokens[2], self.tokens[3])

    def add(self, tokens: Tokens, uncached_input: int, turns: int) -> None:
        self.tokens = plus(self.tokens, tokens)
        self.uncached += uncached_input
        self.turns += turns


def width(start: float, now: float) -> float:
    """The span a sum starting at `start` has at `now`: a minute, an hour once its hour ended over an hour ago, a
    day once its day ended over `HOURS_KEPT_S` ago."""
    if _floor(start, DAY) + DAY <= now - HOURS_KEPT_S:
        return DAY
    if _floor(start, HOUR) + HOUR <= now - HOUR:
        return HOUR
    return MINUTE


def _finite(n: Any) -> TypeGuard[int | float]:
    return (isinstance(n, int) and not isinstance(n, bool)) or (isinstance(n, float) and math.isfinite(n))


def _count(n: Any) -> TypeGuard[int]:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _floor(at: float, span: float) -> float:
    return math.floor(at / span) * span


class Tally:
    """The sums over time, each thread's and run's over all time, and (with a directory) their file."""

    def __init__(self, path: Path | None, clock: Callable[[], float]) -> None:
        self._path = path
        self._clock = clock
        self._spans: dict[float, dict[tuple[float, Keys], Sum]] = {MINUTE: {}, HOUR: {}, DAY: {}}  # by span, start
        self._whole: dict[Keys, Sum] = {}
        self._of_thread: dict[str, list[Sum]] = {}
        self._of_run: dict[str, list[Sum]] = {}
        self.marks: dict[str, Tokens] = {}  # each thread's running total at its latest booking
        self._lines = 0  # the file's lines
        self._folded_at = dict.fromkeys((MINUTE, HOUR), -math.inf)  # when each span's sums were last folded

    def __len__(self) -> int:
        return sum(len(sums) for sums in self._spans.values())

    def _all(self) -> Iterator[Sum]:
        for sums in self._spans.values():
            yield from sums.values()

    # -- adding ------------------------------------------------------------------------------------------------------

    def add(self, at: float, keys: Keys, tokens: Tokens, turns: int, turn: str | None, mark: Tokens | None) -> None:
        """One turn booked at `at` (`turns` 0: an addendum to `turn`), its thread's running total `mark` then."""
        if mark is not None:
            self.marks[keys[0]] = mark
        self._sum(at, 0.0, keys, tokens, uncached(tokens), turns, self._clock())
        if self._path is not None:
            try:
                if not self._lines:  # the first line: its folder made once, not at every booking
                    self._path.parent.mkdir(parents=True, exist_ok=True)
                append_record(
                    self._path, _line(at, keys, tokens, turns, turnId=turn, mark=None if mark is None else list(mark))
                )
                self._lines += 1
            except OSError as exc:
                log.warning("could not journal a usage booking", threadId=keys[0], error=str(exc))
        self.fold()

    def _sum(
        self, at: float, span: float, keys: Keys, tokens: Tokens, uncached_input: int, turns: int, now: float
    ) -> None:
        span = max(span, width(at, now))
        start = _floor(at, span)
        self._into(start, span, keys).add(tokens, uncached_input, turns)
        whole = self._whole.get(keys)
        if whole is None:
            whole = self._whole[keys] = Sum(-math.inf, math.inf, *keys)
            self._of_thread.setdefault(keys[0], []).append(whole)
            if keys[4] is not None:
                self._of_run.setdefault(keys[4], []).append(whole)
        whole.add(tokens, uncached_input, turns)

    def _into(self, start: float, span: float, keys: Keys) -> Sum:
        sums = self._spans[span]
        found = sums.get((start, keys))
        if found is None:
            found = sums[(start, keys)] = Sum(start, span, *keys)
        return found

    def fold(self, force: bool = False) -> None:
        """The sums aged past their span folded into wider ones (the minutes' at most once a minute, the hours' once
        an hour, unless `force`); the file rewritten when any was and it holds more than twice the lines it would."""
        now = self._clock()
        folded = 0
        for span, every in ((MINUTE, MINUTE), (HOUR, HOUR)):
            if not force and 0 <= now - self._folded_at[span] < every:  # a clock set back: due at once
                continue
            self._folded_at[span] = now
            sums = self._spans[span]
            for key, s in [(key, s) for key, s in sums.items() if width(s.start, now) > span]:
                del sums[key]
                wider = width(s.start, now)
                self._into(_floor(s.start, wider), wider, s.keys).add(s.tokens, s.uncached, s.turns)
                folded += 1
        if (folded or force) and self._lines > 2 * (len(self) + len(self.marks)):
            self._rewrite()

    # -- the file --------------------------------------------------------------------------------------------------

    def read_back(self) -> None:
        """A restart: the file's bookings and sums (a malformed line skipped), each thread's latest mark, folded."""
        if self._path is None:
            return
        now = self._clock()
        records = read_records(self._path, 1 << 62)
        self._lines = len(records)
        for record in records:
            thread = record.get("threadId")
            marked = record.get("mark")
            mark = breakdown(dict(zip(BREAKDOWN, marked, strict=False))) if isinstance(marked, list) else None
            if mark is not None and isinstance(thread, str):
                self.marks[thread] = mark
            read = _read(record)
            if read is not None:
                at, span, keys, tokens, uncached_input, turns = read
                self._sum(at, span, keys, tokens, uncached_input, turns, now)
        self.fold(force=True)

    def _rewrite(self) -> None:
        """The file as the sums and the marks (`replace_records`)."""
        assert self._path is not None
        lines = [
            _line(s.start, s.keys, s.tokens, s.turns, span=s.span, uncachedInputTokens=s.uncached) for s in self._all()
        ]
        lines += [{"threadId": thread, "mark": list(mark)} for thread, mark in self.marks.items()]
        try:
            replace_records(self._path, lines)
        except OSError as exc:
            log.warning("could not rewrite the usage ledger's file; it is appended to as before", error=str(exc))
            return
        log.info("rewrote the usage ledger's file as its sums", lines=len(lines), was=self._lines)
        self._lines = len(lines)

    # -- reading ---------------------------------------------------------------------------------------------------

    def since(self, since: float | None) -> Iterator[Sum]:
        """The sums whose span ends after `since` (None: every sum); the days' are skipped for a window within the
        hours kept (each ended before it: `width`)."""
        skip_days = since is not None and since >= self._clock() - HOURS_KEPT_S
        for span, sums in self._spans.items():
            if span == DAY and skip_days:
                continue
            for s in sums.values():
                if since is None or s.end > since:
                    yield s

    def of_thread(self, thread: str) -> Sequence[Sum]:
        return self._of_thread.get(thread, ())

    def of_run(self, run: str) -> Sequence[Sum]:
        return self._of_run.get(run, ())

    def summary(
        self, group_by: Sequence[str], since: float | None, until: float | None, pricing: Pricing
    ) -> list[dict[str, Any]]:
        """`usage/summary`'s rows: the sums starting in [since, until) summed by the `group_by` keys, sorted."""
        rows: dict[tuple[str | None, ...], Sum] = {}
        priced: dict[tuple[str | None, ...], float] = {}
        for s in self._all():
            if (since is not None and s.start < since) or (until is not None and s.start >= until):
                continue
            key = tuple(s.key(group) for group in group_by)
            row = rows.get(key)
            if row is None:
                row = rows[key] = Sum(0.0, 0.0, "", "", None, None, None)
            row.add(s.tokens, s.uncached, s.turns)
            usd = s.usd(pricing)
            if usd is not None:
                priced[key] = priced.get(key, 0.0) + usd
        if not group_by and not rows:
            rows[()] = Sum(0.0, 0.0, "", "", None, None, None)
        listed = []
        for key, row in sorted(rows.items(), key=lambda item: [k or "" for k in item[0]]):
            named = dict(zip(BREAKDOWN, row.tokens, strict=True))
            shown: dict[str, Any] = dict(zip(group_by, key, strict=True))
            shown |= {kind: named[kind] for kind in KINDS}
            shown["turns"] = row.turns
            if key in priced:
                shown["usd"] = round(priced[key], 6)
            listed.append(shown)
        return listed


def _line(at: float, keys: Keys, tokens: Tokens, turns: int, **more: Any) -> dict[str, Any]:
    """A line of the file: a booking's (`turnId`, `mark`) or a sum's (`span`, `uncachedInputTokens`)."""
    thread, provider, model, client, run = keys
    named = dict(zip(BREAKDOWN, tokens, strict=True))
    line = {"at": at, "threadId": thread, "providerId": provider, "model": model, "client": client, "runId": run}
    return line | {kind: named[kind] for kind in KINDS} | {"turns": turns} | more


def _read(record: dict[str, Any]) -> tuple[float, float, Keys, Tokens, int, int] | None:
    """A line of the file as (at, span, keys, tokens, uncached input, turns): a booking's (span 0) or a sum's, or
    None when it is neither (a mark's line, a malformed one)."""
    tokens = breakdown(record)
    at, thread, provider = record.get("at"), record.get("threadId"), record.get("providerId")
    if (
        tokens is None
        or not _finite(at)
        or not EPOCH_RANGE[0] <= at <= EPOCH_RANGE[1]
        or not isinstance(thread, str)
        or not isinstance(provider, str)
    ):
        return None
    optional = [record.get(name) for name in ("model", "client", "runId")]
    model, client, run = (value if isinstance(value, str) else None for value in optional)
    span, turns, fresh = record.get("span"), record.get("turns"), record.get("uncachedInputTokens")
    return (
        float(at),
        float(span) if isinstance(span, (int, float)) and span in (MINUTE, HOUR, DAY) else 0.0,
        (thread, provider, model, client, run),
        tokens,
        fresh if _count(fresh) else uncached(tokens),
        turns if _count(turns) else 1,
    )
