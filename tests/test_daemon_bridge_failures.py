"""The daemon end to end, when a bridge fails: a crash at any point of a turn, a refused or failed start, stray
stdout, a bridge that never answers (real processes and pipes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bbridge.daemon.config import ProviderConfig
from bbridge.wire import errors, rpc
from tests.daemon_turns import START, THREAD, completed, turn
from tests.support import connect, fake_provider, running


async def test_a_crash_mid_turn_is_settled_and_the_next_thread_gets_a_fresh_bridge(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("crash-mid-turn")}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        first_pid = daemon.supervisor.bridges["fake"].pid
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
        events = client.events(THREAD)
        error = next(e for e in events if e["type"] == "provider/error")
        assert "exited unexpectedly (code 3)" in error["message"]
        assert "crashing mid-turn" in error["message"]
        assert error["scope"] == {"kind": "thread"}
        item = next(e for e in events if e["type"] == "item/completed")
        assert item["item"]["status"] == "failed"
        assert events[-1]["type"] == "turn/completed" and events[-1]["status"] == "failed"
        await client.wait_for(
            lambda: any(n == ("bridge/status", n[1]) and n[1]["state"] == "exited" for n in client.notes)
        )
        await client.request("thread/start", {**START, "threadId": "thr_next"})
        assert daemon.supervisor.bridges["fake"].pid != first_pid


@pytest.mark.parametrize(
    ("modes", "code", "words"),
    [
        (
            "grammar-2",
            errors.HANDSHAKE_REFUSED,
            "speaks thread/delta grammar versions 2-2, but this runtime assembles versions 3-3",
        ),
        (
            "old-protocol",
            errors.HANDSHAKE_REFUSED,
            "speaks Provider Bridge Protocol version 1, but this runtime requires version 2",
        ),
        (
            "crash-at-start",
            errors.BRIDGE_START_FAILED,
            '; its stderr ended: "seen initialize {\\"protocolVersion\\": 2, ',
        ),
    ],
)
async def test_refused_or_failed_starts_are_legible(tmp_path: Path, modes: str, code: int, words: str) -> None:
    async with running(tmp_path, {"fake": fake_provider(modes)}) as (daemon, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("thread/start", START)
        assert caught.value.code == code
        assert words in caught.value.message
        assert "\n" not in caught.value.message
        if modes == "crash-at-start":
            assert caught.value.message.endswith(' / "fake bridge: cannot start (crash-at-start)"')
        await client.wait_for(lambda: any(m == "bridge/status" and p["state"] == "failed" for m, p in client.notes))
        failed = {p["reason"] for m, p in client.notes if m == "bridge/status" and p["state"] == "failed"}
        assert failed == {caught.value.message}


async def test_stray_stdout_is_in_the_error_only_before_the_handshake(tmp_path: Path) -> None:
    """Issue 21: a bridge's first non-protocol stdout lines name a failed start; once it is ready none is kept."""
    junk = tmp_path / "junk.py"
    junk.write_text("import sys\nfor n in range(5):\n    print(f'banner {n} ' + 'x' * 300)\nsys.exit(0)\n")
    config = {
        "junk": ProviderConfig(command=[sys.executable, str(junk)]),
        "fake": fake_provider("garbage,exit-on-turn"),
    }
    async with running(tmp_path, config) as (daemon, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("thread/start", {**START, "providerId": "junk"})
        message = caught.value.message
        assert message.startswith("Provider 'junk' exited during startup with code 0; its stdout was not JSON-RPC: ")
        shown = message.split("its stdout was not JSON-RPC: ")[1].split(" / ")
        assert len(shown) == 3 and all(len(json.loads(s)) == 160 and json.loads(s).endswith("…") for s in shown)
        await client.request("thread/start", START)  # `garbage`: a stray line before every answer, handshake too
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("turn/start", turn())
        message = caught.value.message
        assert message.startswith("Provider 'fake' exited unexpectedly (code 5) with turn/start in flight; its stderr")
        assert message.endswith(' / "fake bridge: exiting on turn/start"') and "not JSON-RPC" not in message


async def test_a_bridge_that_never_answers_initialize_says_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bbridge.daemon.bridge.INITIALIZE_TIMEOUT_S", 0.5)
    server = tmp_path / "server.py"
    server.write_text("import time\nprint('Listening on :8080', flush=True)\ntime.sleep(30)\n")
    async with running(tmp_path, {"srv": ProviderConfig(command=[sys.executable, str(server)])}) as (_, path):
        async with connect(path) as client:
            with pytest.raises(rpc.RpcError) as caught:
                await client.request("thread/start", {**START, "providerId": "srv"})
    assert caught.value.code == errors.BRIDGE_START_FAILED
    assert caught.value.message == (
        "Provider 'srv' did not answer initialize within 0.5s; its stdout was not JSON-RPC: \"Listening on :8080\""
    )


async def test_a_bridge_that_never_answers_times_out_with_a_named_error(tmp_path: Path) -> None:
    async with (
        running(tmp_path, {"fake": fake_provider("never-answer")}, request_timeout_s=0.5) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("turn/start", turn())
        assert caught.value.code == errors.BRIDGE_TIMEOUT and "'fake'" in caught.value.message


@pytest.mark.parametrize(
    ("point", "open_items"),
    [("open", 0), ("text", 1), ("done", 0)],
)
async def test_a_crash_at_each_point_of_a_turn(tmp_path: Path, point: str, open_items: int) -> None:
    async with (
        running(tmp_path, {"fake": fake_provider(f"crash-at-{point}")}) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: any(m == "bridge/status" and p["state"] == "exited" for m, p in client.notes))
        await client.wait_for(lambda: completed(client))
        types = client.types(THREAD)
        if point == "done":  # the turn had settled: nothing to settle, no error invented
            assert "provider/error" not in types and types.count("turn/completed") == 1
        else:
            error = next(e for e in client.events(THREAD) if e["type"] == "provider/error")
            assert f"crashing at {point}" in error["message"]
            failed_items = [
                e for e in client.events(THREAD)[types.index("provider/error") :] if e["type"] == "item/completed"
            ]
            assert len(failed_items) == open_items
            for event in failed_items:  # status-bearing items fail; streamed text keeps what arrived
                assert (
                    event["item"].get("status", "failed") == "failed" and event["item"].get("text", "hello") == "hello"
                )
            assert client.events(THREAD)[-1] == {
                **client.events(THREAD)[-1],
                "type": "turn/completed",
                "status": "failed",
            }
        seqs = [entry["seq"] for entry in client.entries[THREAD]]
        assert seqs == list(range(1, len(seqs) + 1))
        await client.request("turn/start", turn(2))  # the next request is served by a fresh bridge
        assert daemon.supervisor.bridges["fake"].state == "ready"
