"""The daemon end to end: a socket client, fake bridge subprocesses, real processes and pipes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from bbridge.bench import stream
from bbridge.core import grammar, native
from bbridge.core.outbox import Delivery
from bbridge.daemon import delivery, router
from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.config import ExtensionKind, ProviderConfig
from bbridge.daemon.journal import Journal
from bbridge.wire import errors, rpc
from tests.support import connect, fake_provider, running

THREAD = "thr_test"
START = {"providerId": "fake", "threadId": THREAD, "cwd": "/tmp", "options": {}}


def turn(n: int = 1, thread: str = THREAD) -> dict[str, Any]:
    return {
        "providerId": "fake",
        "threadId": thread,
        "input": [],
        "clientRequestId": f"creq_{'abcdefghjk'[:9]}{'mnpqrstuvw'[n % 10]}",
    }


def completed(client: Any, thread: str = THREAD, count: int = 1) -> bool:
    return client.types(thread).count("turn/completed") >= count


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


async def test_a_crash_mid_turn_is_settled_and_the_next_thread_gets_a_fresh_bridge(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("crash-mid-turn")}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        first_pid = daemon.bridges["fake"].pid
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
        assert daemon.bridges["fake"].pid != first_pid


async def test_garbage_oversize_lines_and_invalid_deltas_are_survived(tmp_path: Path) -> None:
    provider = fake_provider("garbage,oversize,invalid-delta")
    async with running(tmp_path, {"fake": provider}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client), timeout=30)
        # the v2 kind, and U+001F in a key part (such a line skips the typed pass for `grammar.decode_params`)
        assert daemon.counters.rejected_notifications == 2
        assert "item/completed" in client.types(THREAD)
        texts = [e["item"].get("text") for e in client.events(THREAD) if e["type"] == "item/completed"]
        assert "hel\x1flo" in texts  # U+001F is only refused in key parts


async def test_integral_doubles_in_opaque_payloads_reach_clients_as_integers(tmp_path: Path) -> None:
    """`1.0` from a bridge is the integer 1 to the reference (`JSON.parse` + `JSON.stringify`): so on every path a
    line takes (a line of its own, a read of many lines decoded in one call)."""
    card = ExtensionKind(item={"type": "object"}, state={"type": "object"})
    provider = fake_provider("floats", extension_kinds={"fake/card": card})
    async with running(tmp_path, {"fake": provider}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
        events = client.events(THREAD)
        card = next(e["item"] for e in events if e["type"] == "item/started" and e["item"]["type"] == "extension")
        states = [e["payload"] for e in events if e["type"] == "thread/extensionState/updated"]
    assert card["payload"] == {"n": 1, "half": 0.5} and type(card["payload"]["n"]) is int
    assert states == [{"n": 2}, {"n": 3}] and all(type(state["n"]) is int for state in states)


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


async def test_a_bridge_that_never_answers_times_out_with_a_named_error(tmp_path: Path) -> None:
    async with (
        running(tmp_path, {"fake": fake_provider("never-answer")}, request_timeout_s=0.5) as (daemon, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        with pytest.raises(rpc.RpcError) as caught:
            await client.request("turn/start", turn())
        assert caught.value.code == errors.BRIDGE_TIMEOUT and "'fake'" in caught.value.message


async def test_bridge_requests_are_relayed_to_the_client(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (daemon, path):
        async with connect(path, answer=lambda request: {"answer": 42}) as client:
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            assert client.requests[0].method == "interaction/request"
            texts = [e["delta"] for e in client.events(THREAD) if e["type"] == "item/agentMessage/delta"]
            assert texts == ['{"answer": 42}']


async def test_extension_payloads_are_checked_against_declared_schemas(tmp_path: Path) -> None:
    card = ExtensionKind(item={"type": "object", "properties": {"n": {"type": "integer"}}})
    good = fake_provider("extension", extension_kinds={"fake/card": card})
    bad = fake_provider("bad-extension", extension_kinds={"fake/card": card})
    async with running(tmp_path, {"fake": good, "bad": bad}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client))
        assert any(e["type"] == "item/started" and e["item"]["type"] == "extension" for e in client.events(THREAD))
        await client.request("thread/start", {**START, "providerId": "bad", "threadId": "thr_bad"})
        await client.request("turn/start", {**turn(thread="thr_bad"), "providerId": "bad"})
        await client.wait_for(lambda: completed(client, "thr_bad"))
        unhandled = [e for e in client.events("thr_bad") if e["type"] == "provider/unhandled"]
        assert len(unhandled) == 1 and "fails its schema" in unhandled[0]["rawType"]
        assert unhandled[0]["rawEvent"]["params"]["item"]["payload"] == {"n": "x"}


async def test_a_client_that_never_reads_is_disconnected_without_blocking_the_bridge(tmp_path: Path) -> None:
    from bbridge.daemon.server import Client

    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        ours, theirs = trio.testing.lockstep_stream_pair()  # writes block until the peer reads: it never does
        slow = Client(daemon, ours, ours, "slow", queue_bytes=600)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.run)
            while slow not in daemon.clients:
                await trio.sleep(0.01)
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            assert slow not in daemon.clients
            assert daemon.counters.clients_disconnected_slow == 1
            nursery.cancel_scope.cancel()


class _GatedSend(trio.abc.SendStream):
    """A client's socket that takes nothing until `gate` opens; records each write."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.waiting = trio.Event()  # a write is waiting at the gate
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.waiting.set()
        await self.gate.wait()
        self.writes.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await self.gate.wait()

    async def aclose(self) -> None:
        pass


async def test_answers_go_out_with_the_events_queued_before_them(tmp_path: Path) -> None:
    """A request's answer joins the client's outbox: while the writer waits on the socket, the answers that come
    meanwhile go out in its next write, after the events queued before them (each answer used to be a write of
    its own, and a client with many requests in flight had its events wait behind every one)."""
    from bbridge.daemon.server import Client

    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path):
        socket_out = _GatedSend()
        requests_in, client_in = trio.testing.memory_stream_one_way_pair()
        gated = Client(daemon, socket_out, client_in, "gated", queue_bytes=1 << 20)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gated.run)
            with trio.fail_after(5):
                while gated not in daemon.clients:
                    await trio.sleep(0.01)
                gated.enqueue([b'{"event":1}'])
                await socket_out.waiting.wait()  # the writer holds the event line at the gate
                status = [{"jsonrpc": "2.0", "id": n, "method": "daemon/status"} for n in (1, 2)]
                await requests_in.send_all(b"".join(json.dumps(r).encode() + b"\n" for r in status))
                await trio.testing.wait_all_tasks_blocked()
                gated.enqueue([b'{"event":2}'])
                socket_out.gate.set()
                while sum(write.count(b"\n") for write in socket_out.writes) < 4:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    first, second = socket_out.writes
    assert first == b'{"event":1}\n'
    lines = second.splitlines()
    assert [json.loads(line).get("id") for line in lines[:2]] == [1, 2] and lines[2] == b'{"event":2}'


async def test_bad_json_from_a_client_gets_an_answer_and_the_connection_lives(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path):
        stream = await trio.open_unix_socket(str(path))
        await stream.send_all(b"{not json\n" + b'{"jsonrpc":"2.0","id":7,"method":"daemon/status"}\n')
        data = b""
        with trio.fail_after(5):
            while b'"id":7' not in data:
                data += await stream.receive_some()
        assert b'"counters"' in data
        await stream.aclose()


async def test_shutdown_stops_the_bridges_and_the_daemon(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", START)
        pid = daemon.bridges["fake"].pid
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
        assert daemon.bridges["fake"].state == "ready"


# -- hostile input (issue 10) ---------------------------------------------------


async def test_a_deeply_nested_line_from_a_client_or_a_bridge_is_refused_and_the_daemon_lives(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("deep")}) as (daemon, path):
        stream = await trio.open_unix_socket(str(path))
        deep = b"[" * 100_000 + b"]" * 100_000
        await stream.send_all(b'{"jsonrpc":"2.0","id":3,"method":"initialize","params":' + deep + b"}\n")
        data = b""
        with trio.fail_after(5):
            while b'"id":3' not in data:
                data += await stream.receive_some()
        assert b"nested deeper than 256 levels" in data and b"-32600" in data
        await stream.aclose()
        async with connect(path) as client:  # and a bridge's deep line is junk, its turn goes on
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            status = await client.request("daemon/status")
            assert status["daemon"]["clients"] == 1
            assert status["daemon"]["core"] == native.describe()  # which core runs, compiled or pure


async def test_malformed_bridge_requests_are_refused_and_never_reach_the_client(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("bad-requests")}) as (daemon, path):
        async with connect(path, answer=lambda request: {"answer": 42}) as client:
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            assert client.requests == []
            texts = [e["delta"] for e in client.events(THREAD) if e["type"] == "item/agentMessage/delta"]
            assert json.loads(texts[0]) == [
                [rpc.METHOD_NOT_FOUND, 'Unsupported provider request "interaction/request"'],
                [rpc.METHOD_NOT_FOUND, 'Unsupported provider request "item/tool/call"'],
            ]
            assert daemon.counters.rejected_bridge_requests == 2


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


@pytest.mark.parametrize("method", ["provider/health", "provider/usage"])
async def test_maintenance_requests_keep_their_provider_id(tmp_path: Path, method: str) -> None:
    async with running(tmp_path, {"fake": fake_provider("maintenance")}) as (daemon, path), connect(path) as client:
        result = await client.request(method, {"providerId": "fake"})
        assert result == {"echo": {"providerId": "fake"}}
        assert await client.request("model/list", {"providerId": "fake"}) == {"echo": {}}  # others lose it


async def test_a_reads_first_events_go_out_and_the_cpu_is_offered_before_the_rest_is_assembled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only for a read of more than `EARLY_SEND_MIN` notifications: a smaller one goes out in one send, unyielded."""
    steps: list[Any] = []

    class Sink:
        name = "probe"

        def enqueue(self, lines: list[bytes]) -> None:
            steps.append([json.loads(line)["params"]["events"][0]["event"]["type"] for line in lines])

        async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
            raise AssertionError("nothing is relayed here")

    monkeypatch.setattr(os, "sched_yield", lambda: steps.append("yield"))
    daemon = router.Daemon({"p": ProviderConfig(command=["p"])}, text_delta_flush_ms=0)
    daemon.add_client(Sink())
    bridge = BridgeProcess("p", daemon.providers["p"], daemon, text_delta_flush_ms=0)

    def notes(thread: str) -> list[rpc.Notification]:
        deltas = stream.short_turn(
            thread
        )  # open, three text deltas, text close, usage, boundary: one notification each
        raw = [json.dumps({"threadId": thread, "deltas": [delta]}).encode() for delta in deltas]
        return [rpc.Notification("thread/delta", msgspec.Raw(line)) for line in raw]

    small = notes("thr_small")
    assert len(small) <= delivery.EARLY_SEND_MIN
    await daemon.on_notifications(bridge, small)
    assert len(steps) == 1 and len(steps[0]) == len(small)  # one send, no offer
    steps.clear()
    batch = [note for n in range(delivery.EARLY_SEND_MIN // len(small) + 1) for note in notes(f"thr_{n}")]
    assert len(batch) > delivery.EARLY_SEND_MIN
    await daemon.on_notifications(bridge, batch)
    assert steps[:2] == [["turn/started"], "yield"]  # the first notification's line, then the CPU offered once
    rest = [kind for step in steps[2:] for kind in step]  # every other line after that, no second offer
    assert len(rest) == len(batch) - 1 and rest[0] == "item/started" and rest[-1] == "turn/completed"


async def test_a_bridge_with_more_than_256_open_turns_assembles_every_thread() -> None:
    """The assembler keeps 256 thread states (the reference's bound); the daemon's never evicts a thread's state at
    birth, so the 300th open turn on one bridge streams like the first (it used to produce nothing)."""
    daemon = router.Daemon({"many": ProviderConfig(command=["many"])}, text_delta_flush_ms=0)
    bridge = BridgeProcess("many", daemon.providers["many"], daemon)
    text = {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": "agentMessage", "text": "hi"}
    close = {"kind": "item.textClose", "key": {"providerItemId": "m"}, "channel": "agentMessage"}

    async def send(thread: str, *deltas: dict[str, Any]) -> None:
        raw = msgspec.json.encode({"threadId": thread, "deltas": list(deltas)})
        await daemon.on_notifications(bridge, [rpc.Notification("thread/delta", msgspec.Raw(raw))])

    for n in range(300):
        await send(f"thr_{n}", {"kind": "turn.open"})
    for n in range(300):
        await send(f"thr_{n}", text, close, {"kind": "turn.boundary", "status": "completed"})
    for n in (0, 255, 256, 299):
        entries = daemon.journal.log.thread(f"thr_{n}").entries()
        types = [msgspec.json.decode(entry)["event"]["type"] for entry in entries]
        assert types == ["turn/started", "item/started", "item/agentMessage/delta", "item/completed", "turn/completed"]


async def test_a_notification_that_fails_loses_nothing_else_of_its_read() -> None:
    """A failure inside the compiled delivery (here: the extension check raising for one thread) costs that
    notification only: it is counted and logged, and the read's other notifications are delivered in order."""
    daemon = router.Daemon({"p": ProviderConfig(command=["p"])}, text_delta_flush_ms=0)
    bridge = BridgeProcess("p", daemon.providers["p"], daemon, text_delta_flush_ms=0)

    def check(event: Any) -> Any:
        if event["threadId"] == "thr_bad":
            raise RuntimeError("a broken check")
        return event

    made = daemon.open_delivery(bridge)
    bridge.delivery = Delivery(
        "p", bridge.assembler, bridge.guard, daemon.journal.log, daemon.registry.provider_threads, made.watched, check,
        made.checked,
    )  # fmt: skip
    batch = [
        rpc.Notification("thread/delta", None, grammar.decode_params(json.dumps(params).encode()))
        for thread in ("thr_good", "thr_bad", "thr_other")
        for params in ({"threadId": thread, "deltas": [delta]} for delta in stream.short_turn(thread))
    ]
    await daemon.on_notifications(bridge, batch)
    assert daemon.counters.failed_notifications == 2  # thr_bad's item/started and item/completed met the check
    for thread in ("thr_good", "thr_other"):
        entries = daemon.journal.log.thread(thread).entries()
        assert [msgspec.json.decode(e)["event"]["type"] for e in entries][-1] == "turn/completed"
    assert daemon.counters.deltas_in == len(batch)
