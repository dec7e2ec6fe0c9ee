"""The usage ledger (issue 49): each turn's tokens booked once (`daemon/ledger.py`'s rule, checked against what the
recorded sessions of codex, Claude Code and pi report), summed by `usage/summary` by provider, model, thread, client,
day and run, priced by `[pricing."MODEL"]`, kept across a restart on a journal directory, counted by `/metrics` and
printed by `bbridge usage` (the fake bridge's `usage` mode reports codex-shaped usage: two requests per turn and a
repeat)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bbridge.daemon.inputs import Inputs
from bbridge.daemon.journal import Journal
from bbridge.daemon.ledger import LEDGER_FILE, Ledger
from bbridge.daemon.tally import BREAKDOWN
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.usage_config import usage_from
from bbridge.listen.routes import metrics
from bbridge.usage_report import table, when
from bbridge.wire import rpc
from tests.conftest import require_shared
from tests.support import TestClient, connect, creq, fake_provider, running
from tests.test_ops import bbridge

KINDS = ("inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens", "totalTokens")


# -- the rule, against what the recorded sessions report ----------------------------------------------------------


def bookings(folder: Path) -> list[dict[str, Any]]:
    """The bookings a ledger journaled in `folder`, one per line as made."""
    return [json.loads(line) for line in (folder / LEDGER_FILE).read_text().splitlines()]


def booked(cell: str, folder: Path) -> list[dict[str, Any]]:
    """A recorded cell's canonical events (its golden) through a ledger: what it books."""
    ledger = Ledger(ThreadRegistry(None), Inputs(lambda lines: None), folder)
    for line in (require_shared("golden", cell) / "raw-events.ndjson").read_text().splitlines():
        ledger.observe(cell.split("/")[0], "thr_cell", json.loads(line))
    ledger.close()
    return bookings(folder) if (folder / LEDGER_FILE).exists() else []


# Each turn's spend as the provider counted it: the rise of its running total over the turn (codex, whose counter
# runs across resumes), the session's own total where a resume restarted it (Claude Code, pi), and a fork's own
# requests only (codex's fork total starts from the source thread's). A turn that reported no usage is not booked.
RECORDED = {
    "codex/steer": [("da00000000-t1", 141221), ("da00000000-t2", 0)],  # t2: a compaction re-reports the counter
    "codex/subagent": [("da00000000-t2", 40970), ("da00000000-t1", 61386)],  # the subagent's turn has its own counter
    "codex/fork": [("da00000000-t1", 25569)],  # not the 66235 the fork's counter shows
    "codex/resume": [("da00000000-t1", 20319), ("da00000000-t2", 20347)],
    "codex/turn-tools": [("da00000000-t1", 79676)],  # four requests
    "claude-code/resume": [("da00000000-t1", 29395), ("da00000000-t2", 29446)],  # the resumed session starts at 0
    "claude-code/compaction": [("da00000000-t1", 272919), ("da00000000-t2", 0)],  # /compact reports zero
    "claude-code/stop-interrupt": [("da00000000-t2", 29913)],  # the interrupted turn reported nothing
    "pi/resume": [("da00000000-t1", 7328), ("da00000000-t2", 7356)],
    "pi/compaction": [("da00000000-t1", 7374)],
}


@pytest.mark.parametrize("cell", sorted(RECORDED))
def test_each_recorded_turn_is_booked_once_with_what_it_spent(cell: str, tmp_path: Path) -> None:
    made = booked(cell, tmp_path)
    assert [(b["turnId"], b["totalTokens"]) for b in made] == RECORDED[cell]
    assert all(b["turns"] == 1 and b["providerId"] == cell.split("/")[0] for b in made)


def test_a_turns_breakdown_is_the_sum_of_its_requests(tmp_path: Path) -> None:
    (turn,) = booked("codex/turn-tools", tmp_path)
    # total, input, cached input, output, reasoning output
    assert [turn[kind] for kind in BREAKDOWN] == [79676, 79422, 76800, 254, 0]


def test_a_late_usage_event_is_an_addendum_and_an_unchanged_total_a_repeat(tmp_path: Path) -> None:
    ledger = Ledger(ThreadRegistry(None), Inputs(lambda lines: None), tmp_path)

    def usage(total: int, last: int) -> dict[str, Any]:
        breakdown = dict.fromkeys(KINDS, 0)
        scope = {"kind": "turn", "turnId": "t1"}
        return {"type": "thread/tokenUsage/updated", "scope": scope, "tokenUsage": {
            "total": {**breakdown, "totalTokens": total}, "last": {**breakdown, "totalTokens": last}}}  # fmt: skip

    for event in (usage(10, 10), usage(10, 10), {"type": "turn/completed", "scope": {"kind": "turn", "turnId": "t1"}}):
        ledger.observe("p", "thr", event)
    ledger.observe("p", "thr", usage(15, 5))  # scoped to the turn that ended: booked on its own
    assert [(b["turnId"], b["totalTokens"], b["turns"]) for b in bookings(tmp_path)] == [("t1", 10, 1), ("t1", 5, 0)]


# -- the daemon's ledger ------------------------------------------------------------------------------------------


def spent(client: TestClient, thread: str) -> list[dict[str, int]]:
    """Each turn's spend on the thread, independent of the ledger's rule: the rise of the bridge's running total
    (`tokenUsage.total`) over the turn (the fake's counter starts at zero in each bridge process)."""
    turns, before, latest = [], dict.fromkeys(KINDS, 0), None
    for event in client.events(thread):
        if event["type"] == "thread/tokenUsage/updated":
            latest = event["tokenUsage"]["total"]
        elif event["type"] == "turn/completed" and latest is not None:
            turns.append({kind: latest[kind] - before[kind] for kind in KINDS})
            before, latest = latest, None
    return turns


def expected(rows: list[tuple[dict[str, Any], dict[str, int]]], by: list[str]) -> dict[tuple[Any, ...], dict[str, int]]:
    sums: dict[tuple[Any, ...], dict[str, int]] = {}
    for keys, tokens in rows:
        row = sums.setdefault(tuple(keys[k] for k in by), dict.fromkeys((*KINDS, "turns"), 0))
        for kind in KINDS:
            row[kind] += tokens[kind]
        row["turns"] += 1
    return sums


def summed(answer: dict[str, Any], by: list[str]) -> dict[tuple[Any, ...], dict[str, int]]:
    return {tuple(row[k] for k in by): {k: row[k] for k in (*KINDS, "turns")} for row in answer["rows"]}


async def named(client: TestClient, name: str) -> TestClient:
    await client.request("initialize", {"client": {"name": name, "version": "1"}, "protocolVersion": 1})
    return client


SCENARIO = [  # (thread, provider, model or None) and who starts each turn
    ("thr_a", "fa", "model-1", ["alice", "alice"]),
    ("thr_b", "fb", "model-2", ["bob", "alice"]),
    ("thr_c", "fa", None, ["bob"]),
]


async def play(clients: dict[str, TestClient], first: int = 0) -> list[tuple[dict[str, Any], dict[str, int]]]:
    """The scenario's threads constructed and their turns run, one at a time; each turn's keys and spend."""
    played, seen, n = [], clients["alice"], first
    for thread, provider, model, starters in SCENARIO:
        options = {"model": model} if model else {}
        start = {"providerId": provider, "threadId": thread, "cwd": "/tmp", "options": options}
        await seen.request("thread/start", start)
        done = len(seen.of(thread, "turn/completed"))
        for who in starters:
            n, done = n + 1, done + 1
            await clients[who].request("turn/start", {"threadId": thread, "input": [], "clientRequestId": creq(n)})
            await seen.wait_for(lambda t=thread, d=done: len(seen.of(t, "turn/completed")) >= d)
        for who, tokens in zip(starters, spent(seen, thread)[-len(starters) :], strict=True):
            played.append(({"provider": provider, "model": model, "thread": thread, "client": who}, tokens))
    return played


BY = [["provider"], ["model"], ["thread"], ["client"], ["provider", "model", "thread", "client"]]


async def test_the_ledger_sums_equal_the_turns_reported_usage_before_and_after_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    providers = {"fa": fake_provider("usage"), "fb": fake_provider("usage")}
    async with (
        running(tmp_path, providers, journal=Journal(directory=folder)) as (daemon, path),
        connect(path) as alice,
        connect(path) as bob,
    ):
        clients = {"alice": await named(alice, "alice"), "bob": await named(bob, "bob")}
        played = await play(clients)
        before = {tuple(by): await alice.request("usage/summary", {"groupBy": by}) for by in BY}
    for by in BY:
        assert summed(before[tuple(by)], by) == expected(played, by), by
    assert {row["model"] for row in before[("model",)]["rows"]} == {"model-1", "model-2", None}
    assert (folder / "usage" / "ledger.ndjson").exists()
    async with (
        running(tmp_path, providers, journal=Journal(directory=folder)) as (daemon, path),
        connect(path) as alice,
        connect(path) as bob,
    ):
        clients = {"alice": await named(alice, "alice"), "bob": await named(bob, "bob")}
        for by in BY:
            assert await alice.request("usage/summary", {"groupBy": by}) == before[tuple(by)]
        played += await play(clients, first=5)  # fresh bridges: their counters start at zero again
        after = {tuple(by): await alice.request("usage/summary", {"groupBy": by}) for by in BY}
    for by in BY:
        assert summed(after[tuple(by)], by) == expected(played, by), by


async def test_without_a_journal_the_ledger_is_in_memory_and_restarts_empty(tmp_path: Path) -> None:
    async with running(tmp_path, {"fa": fake_provider("usage")}) as (_, path), connect(path) as alice:
        await alice.request("thread/start", {"providerId": "fa", "threadId": "thr_m", "cwd": "/tmp", "options": {}})
        await alice.request("turn/start", {"threadId": "thr_m", "input": [], "clientRequestId": creq(1)})
        await alice.wait_for(lambda: bool(alice.of("thr_m", "turn/completed")))
        (row,) = (await alice.request("usage/summary", {}))["rows"]
    assert row["turns"] == 1 and row["totalTokens"] == spent(alice, "thr_m")[0]["totalTokens"]
    async with running(tmp_path, {"fa": fake_provider("usage")}) as (_, path), connect(path) as alice:
        assert (await alice.request("usage/summary", {"groupBy": ["thread"]}))["rows"] == []


# -- usage/summary, pricing, /metrics, bbridge usage ----------------------------------------------------------------

PRICED = usage_from(
    {
        "pricing": {
            "model-1": {"input_per_mtok": 2.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 8.0},
            "model-*": {"input_per_mtok": 1.0, "output_per_mtok": 4.0},  # a glob: model-2 (cached at the input price)
        }
    }
)


async def one_turn(client: TestClient, thread: str, provider: str, n: int, **start: Any) -> dict[str, int]:
    """A thread constructed and one turn run on it; what the turn spent."""
    await client.request("thread/start", {"providerId": provider, "threadId": thread, "cwd": "/tmp", **start})
    await client.request("turn/start", {"threadId": thread, "input": [], "clientRequestId": creq(n)})
    await client.wait_for(lambda: bool(client.of(thread, "turn/completed")))
    return spent(client, thread)[-1]


def usd(tokens: dict[str, int], fresh: float, cached: float, output: float) -> float:
    uncached = tokens["totalTokens"] - tokens["cachedInputTokens"] - tokens["outputTokens"]
    return (uncached * fresh + tokens["cachedInputTokens"] * cached + tokens["outputTokens"] * output) / 1e6


async def test_summary_by_day_and_run_within_since_and_until_priced(tmp_path: Path) -> None:
    async with running(tmp_path, {"fa": fake_provider("usage")}, spending=PRICED) as (daemon, path), connect(path) as c:
        a = await one_turn(c, "thr_a", "fa", 1, options={"model": "model-1"})
        b = await one_turn(
            c, "thr_b", "fa", 2, options={"model": "model-2"}, hidden={"runId": "prun_1", "role": "worker"}
        )
        u = await one_turn(c, "thr_u", "fa", 3, options={})  # no model: no price
        now = time.time()
        by_run = await c.request("usage/summary", {"groupBy": ["run", "model"]})
        by_day = await c.request("usage/summary", {"groupBy": ["day"], "since": now - 3600, "until": now + 60})
        later = await c.request("usage/summary", {"groupBy": ["day"], "since": now + 60})
        earlier = await c.request("usage/summary", {"until": now - 3600})
        total = await c.request("usage/summary", {})
        with pytest.raises(rpc.RpcError) as refused:
            await c.request("usage/summary", {"groupBy": ["weekday"]})
        exposition = metrics(daemon).decode()
    rows = {(row["run"], row["model"]): row for row in by_run["rows"]}
    assert set(rows) == {(None, "model-1"), ("prun_1", "model-2"), (None, None)}
    assert rows[(None, "model-1")]["usd"] == pytest.approx(usd(a, 2.0, 0.5, 8.0), abs=1e-6)
    assert rows[("prun_1", "model-2")]["usd"] == pytest.approx(usd(b, 1.0, 1.0, 4.0), abs=1e-6)
    assert "usd" not in rows[(None, None)] and rows[(None, None)]["totalTokens"] == u["totalTokens"]
    (today,) = by_day["rows"]
    assert today["day"] == time.strftime("%Y-%m-%d", time.gmtime(now)) and today["turns"] == 3
    assert later["rows"] == [] and earlier["rows"] == [dict.fromkeys((*KINDS, "turns"), 0)]
    assert total["rows"][0]["totalTokens"] == sum(t["totalTokens"] for t in (a, b, u))
    assert refused.value.code == rpc.INVALID_PARAMS and "groupBy" in refused.value.message
    for model, tokens in (("model-1", a), ("model-2", b), ("", u)):
        for kind, field in (("input", "inputTokens"), ("output", "outputTokens"), ("total", "totalTokens")):
            line = f'bbridge_tokens_total{{kind="{kind}",model="{model}",provider="fa"}} {float(tokens[field])}'
            assert line in exposition, line


def test_since_and_until_read_durations_dates_and_epoch_seconds() -> None:
    now = 1_800_000_000.0
    assert when("24h", now) == now - 86400 and when("30m", now) == now - 1800 and when("2w", now) == now - 14 * 86400
    assert when("2027-01-15", now) == 1_799_971_200.0  # midnight UTC
    assert when("2027-01-15T01:00:00+01:00", now) == 1_799_971_200.0
    assert when("1799971200", now) == 1_799_971_200.0
    with pytest.raises(ValueError, match="expected a duration"):
        when("yesterday", now)


def test_the_table_aligns_keys_and_numbers_with_a_total() -> None:
    rows = [
        {"provider": "codex", "model": None, "inputTokens": 10, "cachedInputTokens": 2, "outputTokens": 3,
         "reasoningOutputTokens": 0, "totalTokens": 13, "turns": 1, "usd": 0.5},
        {"provider": "pi", "model": "m", "inputTokens": 5, "cachedInputTokens": 0, "outputTokens": 1,
         "reasoningOutputTokens": 0, "totalTokens": 6, "turns": 2},
    ]  # fmt: skip
    assert table(["provider", "model"], rows) == [
        "PROVIDER  MODEL  INPUT  CACHED  OUTPUT  REASONING  TOTAL  TURNS     USD",
        "codex     -         10       2       3          0     13      1  0.5000",
        "pi        m          5       0       1          0      6      2       -",
        "total               15       2       4          0     19      3  0.5000",
    ]
    assert table([], [dict.fromkeys((*KINDS, "turns"), 0)]) == ["no usage booked"]


async def test_bbridge_usage_prints_the_ledger(tmp_path: Path) -> None:
    async with running(tmp_path, {"fa": fake_provider("usage")}, spending=PRICED) as (daemon, path), connect(path) as c:
        a = await one_turn(c, "thr_a", "fa", 1, options={"model": "model-1"})
        printed = await bbridge("usage", "--socket", str(path))
        as_json = await bbridge("usage", "--socket", str(path), "--by", "thread", "--since", "1h", "--json")
        none = await bbridge("usage", "--socket", str(path), "--since", "2999-01-01")
        wrong = await bbridge("usage", "--socket", str(path), "--by", "provider,weekday")
        summary = await c.request("usage/summary", {"groupBy": ["thread"], "since": time.time() - 3600})
    assert printed.returncode == 0, printed.stderr
    head, line = printed.stdout.decode().splitlines()
    assert head.split() == ["PROVIDER", "MODEL", "INPUT", "CACHED", "OUTPUT", "REASONING", "TOTAL", "TURNS", "USD"]
    assert line.split()[:8] == ["fa", "model-1", *(str(a[k]) for k in KINDS), "1"]
    assert json.loads(as_json.stdout) == summary
    assert none.stdout.decode() == "no usage booked\n"
    assert wrong.returncode == 2 and b"weekday" in wrong.stderr


async def test_a_dead_bridges_settled_turn_is_booked_and_a_fallback_names_the_model(tmp_path: Path) -> None:
    """The bridge exits after reporting usage, before its turn ends: the daemon's settlement books the turn. With no
    `options.model`, the model a `provider/modelFallback` fell back to is the booking's."""
    crashing = fake_provider("usage,crash-at-usage", env={"FAKE_MODEL_FALLBACK": "fallback-9"})
    async with running(tmp_path, {"fa": crashing}) as (daemon, path), connect(path) as c:
        await c.request("thread/start", {"providerId": "fa", "threadId": "thr_x", "cwd": "/tmp", "options": {}})
        await c.request("turn/start", {"threadId": "thr_x", "input": [], "clientRequestId": creq(1)})
        await c.wait_for(lambda: bool(c.of("thr_x", "turn/completed")))
        (row,) = (await c.request("usage/summary", {"groupBy": ["model", "thread"]}))["rows"]
        reported = c.of("thr_x", "thread/tokenUsage/updated")[-1]["tokenUsage"]["total"]
    assert c.of("thr_x", "turn/completed")[0]["status"] == "failed"
    assert row["model"] == "fallback-9" and row["turns"] == 1
    assert {kind: row[kind] for kind in KINDS} == {kind: reported[kind] for kind in KINDS}
