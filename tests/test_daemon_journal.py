"""The daemon end to end, its journal: what a reconnecting client missed, the bound, a restart, unsafe thread
ids as file names, a torn tail after a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bbridge.daemon.journal import Journal
from tests.daemon_turns import START, THREAD, completed, turn
from tests.support import connect, fake_provider, running


async def test_a_reconnecting_client_gets_exactly_what_it_missed(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path):
        async with connect(path) as first:
            await first.request("thread/start", START)
            await first.request("turn/start", turn())
            await first.wait_for(lambda: completed(first))
            seen = first.entries[THREAD][-1]["seq"]
        async with connect(path) as other:
            await other.request("turn/start", turn(2))
            await other.wait_for(lambda: completed(other))
        async with connect(path) as again:
            replay = await again.request("thread/events", {"threadId": THREAD, "afterSeq": seen})
            seqs = [entry["seq"] for entry in replay["events"]]
            assert seqs == list(range(seen + 1, replay["lastSeq"] + 1)) and seqs
            assert replay["events"][-1]["event"]["type"] == "turn/completed"


async def test_journal_bound_reports_what_it_cannot_serve(tmp_path: Path) -> None:
    from bbridge.daemon.journal import Journal

    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(bound=3)) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
        replay = await client.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
        assert len(replay["events"]) == 3
        assert replay["missingThrough"] == replay["lastSeq"] - 3


async def test_durable_journal_survives_a_daemon_restart(tmp_path: Path) -> None:
    from bbridge.daemon.journal import Journal

    folder = tmp_path / "journal"
    async with running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (_, path):
        async with connect(path) as client:
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            before = client.entries[THREAD]
    async with running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (_, path):
        async with connect(path) as client:
            replay = await client.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
            assert replay["events"] == before
            await client.request("thread/resume", START)
            await client.wait_for(lambda: bool(client.entries[THREAD]))
            assert client.entries[THREAD][0]["seq"] == before[-1]["seq"] + 1


@pytest.mark.parametrize("long_id", ["t" * 304, "é" * 43 + "-thread"])
async def test_long_or_non_ascii_thread_ids_lose_no_events_with_a_journal(tmp_path: Path, long_id: str) -> None:
    journal = Journal(directory=tmp_path / "journal")
    async with (
        running(tmp_path, {"fake": fake_provider("pair")}, journal=journal) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", {**START, "threadId": "thr_other"})
        await client.request("thread/start", {**START, "threadId": long_id})
        await client.request("turn/start", turn(thread=long_id))
        await client.wait_for(lambda: completed(client, thread=long_id))
        await client.wait_for(lambda: "thread/name/updated" in client.types("thr_other"))
        assert "thread/name/updated" in client.types(long_id)
        assert daemon.counters.failed_notifications == 0
        assert daemon.status()["journal"]["writeErrors"] == 0


async def test_a_torn_journal_tail_after_a_crash_keeps_the_thread_going(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=directory)) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
        last = client.entries[THREAD][-1]["seq"]
    files = list(directory.iterdir())
    with files[0].open("ab") as torn:  # a crash mid-write
        torn.write(b'{"seq":' + str(last + 1).encode() + b',"event":{"type":"item/')
    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=directory)) as (daemon, path),
        connect(path) as client,
    ):
        replay = await client.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
        assert [e["seq"] for e in replay["events"]] == list(range(1, last + 1))
        await client.request("thread/resume", START)
        await client.request("turn/start", turn(2))
        await client.wait_for(lambda: completed(client))
        assert client.entries[THREAD][0]["seq"] == last + 1  # never a seq the client already has
        status = await client.request("daemon/status")
        assert status["journal"]["truncatedTails"] == 1
