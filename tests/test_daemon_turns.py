"""The daemon end to end, a turn's way: stamped and numbered events, steer and interrupt, the watchdogs, the
methods it routes and relays, shutdown and record mode (a socket client, fake bridge subprocesses).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import trio.testing

from bbridge.wire import errors, rpc
from tests.daemon_turns import START, THREAD, completed, turn
from tests.support import connect, fake_provider, running


async def test_turn_events_have_contiguous_seq_and_stamped_ids(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        init = await client.request("initialize", {"client": {"name": "t", "version": "1"}, "protocolVersion": 1})
        assert init["grammarVersions"] == [3, 3] and init["protocolVersion"] == 1
        result = await client.request("thread/start", START)
        assert result == {"providerThreadId": f"prov-{THREAD}"}
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
        seqs = [entry["seq"] for entry in client.entries[THREAD]]
        assert seqs == list(range(1, len(seqs) + 1))
        events = client.events(THREAD)
        assert all(event["threadId"] == THREAD for event in events)
        stamped = [e for e in events if "providerThreadId" in e]
        assert stamped and all(e["providerThreadId"] == f"prov-{THREAD}" for e in stamped)
        assert client.types(THREAD)[-1] == "turn/completed"
        assert daemon.counters.deltas_in > 0


async def test_steer_and_interrupt_reach_a_keyed_bridge_with_provider_turn_ids(tmp_path: Path) -> None:
    async with (
        running(tmp_path, {"fake": fake_provider("keyed,silent-turn")}) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: "turn/started" in client.types(THREAD))
        bb_turn = client.events(THREAD)[client.types(THREAD).index("turn/started")]["scope"]["turnId"]
        assert bb_turn != "pt-1"
        steer = await client.request("turn/steer", {**turn(2), "expectedTurnId": bb_turn})
        assert steer == {"steeredTurnId": "pt-1"}
        stop = await client.request(
            "thread/stop", {"providerId": "fake", "threadId": THREAD, "intent": "interrupt", "activeTurnId": bb_turn}
        )
        assert stop == {"stoppedTurnId": "pt-1"}


async def test_turn_start_watchdog_fires_exactly_once(tmp_path: Path) -> None:
    provider = fake_provider("no-start", turn_start_timeout_s=0.3, turn_start_sweep_s=0.05)
    async with running(tmp_path, {"fake": provider}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: "system/error" in client.types(THREAD))
        await trio.sleep(0.5)
        errors_seen = [e for e in client.events(THREAD) if e["type"] == "system/error"]
        assert len(errors_seen) == 1
        assert errors_seen[0]["code"] == "provider_turn_start_timeout"
        assert errors_seen[0]["scope"] == {"kind": "thread"}
        assert "did not start it within 0s" in errors_seen[0]["message"]


async def test_turn_stall_watchdog_warns_once_until_traffic(tmp_path: Path) -> None:
    provider = fake_provider("silent-turn", turn_stall_timeout_s=0.3, turn_start_sweep_s=0.05)
    async with running(tmp_path, {"fake": provider}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: "system/warning" in client.types(THREAD))
        await trio.sleep(0.4)
        warnings = [e for e in client.events(THREAD) if e["type"] == "system/warning"]
        assert len(warnings) == 1 and warnings[0]["code"] == "provider_turn_stalled"
        assert "turn/completed" not in client.types(THREAD)


async def test_unknown_methods_and_providers(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("no/such/method", {})
        assert caught.value.code == rpc.METHOD_NOT_FOUND
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("thread/start", {**START, "providerId": "nobody"})
        assert caught.value.code == errors.UNKNOWN_PROVIDER and "nobody" in caught.value.message
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("thread/name/set", {**START, "title": "x"})
        assert caught.value.code == errors.NOT_ADVERTISED
        models = await client.request("model/list", {"providerId": "fake"})
        assert models["models"] == [{"id": "fake-1"}]


async def test_bridge_requests_are_relayed_to_the_client(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (daemon, path):
        async with connect(path, answer=lambda request: {"answer": 42}) as client:
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            assert client.requests[0].method == "interaction/request"
            texts = [e["delta"] for e in client.events(THREAD) if e["type"] == "item/agentMessage/delta"]
            assert texts == ['{"answer": 42}']


async def test_shutdown_stops_the_bridges_and_the_daemon(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        pid = daemon.supervisor.bridges["fake"].pid
        assert pid is not None
        assert await client.request("shutdown", {}) == {}
        assert daemon.stopped.is_set()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_record_mode_writes_the_runtime_lanes(tmp_path: Path) -> None:
    from bbridge.wire.lanes import read_cell

    record = tmp_path / "rec"
    async with (
        running(tmp_path, {"fake": fake_provider()}, record_dir=record) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
    cell = record / "fake" / THREAD
    entries = read_cell(cell)
    assert {e.dir for e in entries} == {"runtime→bridge", "bridge→runtime"}
    assert (record / "fake" / "_process" / "runtime→bridge.ndjson").exists()  # initialize


@pytest.mark.parametrize("method", ["provider/health", "provider/usage"])
async def test_maintenance_requests_keep_their_provider_id(tmp_path: Path, method: str) -> None:
    async with running(tmp_path, {"fake": fake_provider("maintenance")}) as (daemon, path), connect(path) as client:
        result = await client.request(method, {"providerId": "fake"})
        assert result == {"echo": {"providerId": "fake"}}
        assert await client.request("model/list", {"providerId": "fake"}) == {"echo": {}}  # others lose it
