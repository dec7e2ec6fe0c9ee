"""The usage ledger's sums (`daemon/tally.py`): bookings summed by minute, folded into hours and days as they age, so
what the ledger keeps (in memory and in its file) grows with the threads and hours it has seen, not with its turns;
the rolling windows never count less than they hold, `usage/summary` never counts a booking twice, and a restart
reads back the same sums and marks from a file rewritten as them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from bbridge.daemon.tally import DAY, HOUR, MINUTE, Keys, Tally, Tokens, width
from bbridge.daemon.usage_config import Pricing, usage_from

T0 = 1_799_971_200.0  # a UTC midnight (2027-01-15)
KEYS: Keys = ("thr_a", "codex", "gpt", "alice", None)
PRICED: Pricing = usage_from({"pricing": {"gpt": {"input_per_mtok": 1.0, "output_per_mtok": 10.0}}}).pricing


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def tokens(total: int, cached: int = 0, output: int = 0) -> Tokens:
    return (total, total - output, cached, output, 0)


def book(tally: Tally, clock: Clock, keys: Keys, spent: Tokens, mark: Tokens | None = None) -> None:
    tally.add(clock.now, keys, spent, 1, "turn", mark)


def totals(tally: Tally, **window: Any) -> tuple[int, int]:
    (row,) = tally.summary([], window.get("since"), window.get("until"), PRICED)
    return row["totalTokens"], row["turns"]


def test_a_sum_widens_as_it_ages() -> None:
    assert width(T0 + 30, T0 + 3599) == MINUTE
    assert width(T0 + 30, T0 + 2 * HOUR - 1) == MINUTE  # its hour ended less than an hour ago
    assert width(T0 + 30, T0 + 2 * HOUR) == HOUR
    assert width(T0 + 30, T0 + 31 * DAY - 1) == HOUR  # its day ended less than 30 days ago
    assert width(T0 + 30, T0 + 31 * DAY) == DAY


def test_four_months_of_turns_keep_two_hours_of_minutes_a_month_of_hours_and_days_before() -> None:
    clock = Clock(T0)
    tally = Tally(None, clock)
    minutes = 120 * 24 * 60
    for n in range(0, minutes, 61):  # every 61 minutes, two threads
        clock.now = T0 + n * MINUTE + 5
        book(tally, clock, KEYS, tokens(10))
        book(tally, clock, ("thr_b", "pi", None, "bob", "prun_1"), tokens(1))
    turns = 2 * len(range(0, minutes, 61))
    # per thread: at most two hours of minutes, 31 days of hours, a day per day before
    assert len(tally) <= 2 * (2 + 32 * 24 + 120)
    assert totals(tally) == (11 * turns // 2, turns)
    assert sum(s.tokens[0] for s in tally.of_thread("thr_a")) == 10 * turns // 2
    assert sum(s.turns for s in tally.of_run("prun_1")) == turns // 2


def test_a_rolling_window_never_counts_less_than_it_holds_and_at_most_its_tail_span_more() -> None:
    clock = Clock(T0)
    tally = Tally(None, clock)
    for n in range(72 * 60):  # a turn every minute for three days, 1 token each
        clock.now = T0 + n * MINUTE + 30
        book(tally, clock, KEYS, tokens(1))
    now = clock.now
    for window, tail in ((HOUR, MINUTE), (DAY, HOUR)):
        counted = sum(s.tokens[0] for s in tally.since(now - window))
        held = sum(1 for n in range(72 * 60) if T0 + n * MINUTE + 30 > now - window)
        assert held <= counted <= held + tail / MINUTE, (window, counted, held)


def test_summary_periods_side_by_side_count_every_booking_once() -> None:
    clock = Clock(T0)
    tally = Tally(None, clock)
    for n in range(40 * 24):  # a turn every hour and a half-minute for 40 days
        clock.now = T0 + n * HOUR + 30
        book(tally, clock, KEYS, tokens(2))
    edges = [T0 + k * 5 * DAY for k in range(9)]
    parts = [totals(tally, since=a, until=b)[1] for a, b in itertools.pairwise(edges)]
    assert sum(parts) == totals(tally)[1] == 40 * 24
    by_day = tally.summary(["day"], None, None, PRICED)
    assert len(by_day) == 40 and all(row["turns"] == 24 for row in by_day)


def test_prices_are_kept_per_booking_through_the_folds() -> None:
    """The input not from the cache is cut at zero per booking, so a sum keeps its own; priced after folding it
    costs what its bookings did."""
    clock = Clock(T0)
    tally = Tally(None, clock)
    book(tally, clock, KEYS, (100, 0, 150, 0, 0))  # more cached than total: no fresh input
    book(tally, clock, KEYS, (100, 100, 0, 20, 0))  # 80 fresh, 20 output
    expected = (80 * 1.0 + 150 * 1.0 + 20 * 10.0) / 1e6  # cached input at the input price (none given)
    clock.now = T0 + 40 * DAY
    tally.fold()
    (row,) = tally.summary(["model"], None, None, PRICED)
    assert len(tally) == 1 and row["usd"] == round(expected, 6)


def test_the_file_is_rewritten_as_its_sums_and_read_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "usage" / "ledger.ndjson"
    clock = Clock(T0)
    tally = Tally(path, clock)
    for n in range(600):  # a turn every 10 minutes, marks rising
        clock.now = T0 + n * 10 * MINUTE
        book(tally, clock, KEYS, tokens(3, cached=1, output=1), mark=tokens(3 * (n + 1)))
    lines = len(path.read_text().splitlines())
    assert lines < 600 / 2  # rewritten as it went: hours of six turns each
    before = tally.summary(["thread", "day"], None, None, PRICED)
    path.write_text(path.read_text() + "not json\n" + json.dumps({"at": "x"}) + "\n")  # bad lines are skipped
    again = Tally(path, clock)
    again.read_back()
    assert again.summary(["thread", "day"], None, None, PRICED) == before
    assert again.marks == {"thr_a": tokens(1800)}
    assert len(path.read_text().splitlines()) <= 2 * (len(again) + 1)  # never more than twice the sums and mark


def test_a_file_of_bookings_from_before_is_read_back_folded_and_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    clock = Clock(T0)
    tally = Tally(path, clock)
    for n in range(500):  # every booking in the file, 500 turns in 50 minutes
        clock.now = T0 + n * 6
        book(tally, clock, KEYS, tokens(1))
    assert len(path.read_text().splitlines()) == 500
    clock.now = T0 + 3 * HOUR
    again = Tally(path, clock)
    again.read_back()
    assert len(again) == 1 and totals(again) == (500, 500)
    assert len(path.read_text().splitlines()) == 1


def test_a_clock_set_back_still_folds_and_a_sum_from_the_future_counts_until_then() -> None:
    clock = Clock(T0)
    tally = Tally(None, clock)
    clock.now = T0 + 365 * DAY  # a clock a year ahead for one booking
    book(tally, clock, KEYS, tokens(7))
    for n in range(3 * 60):  # set right again: a turn every minute for three hours
        clock.now = T0 + n * MINUTE
        book(tally, clock, KEYS, tokens(1))
    assert len(tally) <= 2 * 60 + 3  # folded as it went: two hours of minutes, an hour, the future one
    assert totals(tally) == (187, 181)
    # the last hour: its 60 turns, the minute it starts in (a sum ending inside it) and the future one (the safe side)
    assert sum(s.tokens[0] for s in tally.since(clock.now - HOUR)) == 61 + 7


def test_lines_that_are_no_booking_are_skipped_and_a_torn_line_loses_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    good = {"at": T0, "threadId": "thr_a", "providerId": "codex", "totalTokens": 5, "inputTokens": 5,
            "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0, "turns": 1}  # fmt: skip
    bad = [
        {**good, "totalTokens": 1e400},  # json reads it as infinity
        {**good, "at": 1e300},  # past the year 9999
        {**good, "mark": 5},
        {"at": 1, "threadId": "thr_a"},
        {"threadId": "thr_a", "mark": [1e400, 0, 0, 0, 0]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in [good, *bad]) + '{"at": 17999', encoding="utf-8")
    clock = Clock(T0 + 60)
    tally = Tally(path, clock)
    tally.read_back()
    assert totals(tally) == (10, 2) and tally.marks == {}  # the good line, and the one whose mark is no breakdown
    assert [row["day"] for row in tally.summary(["day"], None, None, PRICED)] == ["2027-01-15"]
    book(tally, clock, KEYS, tokens(3))  # after the torn line: on a line of its own
    again = Tally(path, clock)
    again.read_back()
    assert totals(again) == (13, 3)


def test_a_file_of_nothing_the_ledger_reads_is_rewritten_empty(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    path.write_text(json.dumps({"at": 1, "threadId": "thr_a"}) + "\n" + "junk\n" * 3, encoding="utf-8")
    tally = Tally(path, Clock(T0))
    tally.read_back()
    assert len(tally) == 0 and path.read_text() == ""
