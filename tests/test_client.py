"""`bbridge.client`, the Python client of the daemon's API, on anyio: under trio against an in-process daemon, and
under asyncio against a `bbridge serve` child restarted with its journal; the event iterator resumes across a
dropped connection and a daemon restart with no gap and no duplicate."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import trio

from bbridge.client import LEAVE, Client, DaemonError, Disconnected, Notice, client_request_id
from bbridge.core.scalars import ClientRequestId
from bbridge.daemon.config import echo_provider
from bbridge.wire import errors, rpc
from bbridge.wire.client_api import BridgeStatus, ThreadEventsNotification
from tests.support import FULL, fake_provider, running

SERVE = [sys.executable, "-m", "bbridge", "serve", "--flush-ms", "0", "--log-level", "warning"]
THREAD = "thr_client"
START = {"providerId": "echo", "threadId": THREAD, "cwd": "/tmp", "options": FULL}


def turn(n: int, text: str) -> dict[str, Any]:
    creq = f"creq_abcdefghj{'23456789ab'[n % 10]}"
    return {"providerId": "echo", "threadId": THREAD, "clientRequestId": creq, "options": FULL,
            "input": [{"type": "text", "text": text, "mentions": []}]}  # fmt: skip


async def collect(client: Client, until_completed: int, after: int = 0) -> list[int]:
    seqs: list[int] = []
    completed = 0
    with anyio.fail_after(30):
        async for entry in client.events(THREAD, after):
            seqs.append(entry.seq)
            completed += entry.event["type"] == "turn/completed"
            if completed >= until_completed:
                return seqs
    return seqs


async def test_under_trio_calls_and_events_resume_across_a_dropped_connection(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path):
        async with Client.connect(path) as client, Client.connect(path) as driver:
            assert (await client.status()).daemon["name"] == "bbridge"
            await client.request("thread/start", START)
            await client.request("turn/start", turn(1, "deltas:all"))
            seqs = await collect(client, 1)
            assert client._link is not None
            await client._link.stream.aclose()  # the connection drops between two turns
            with pytest.raises(DaemonError):
                await client.status()  # a call on a dropped connection says so
            await driver.request("turn/start", turn(2, "hello again"))
            seqs += await collect(client, 1, after=seqs[-1])  # the iterator reconnects and resumes
            assert seqs == list(range(1, len(seqs) + 1))
            assert (await client.pending(THREAD)).pending == []  # the client is connected again
            with pytest.raises(DaemonError) as refused:
                await client.respond("req_nope", {"decision": "deny"})
            assert refused.value.code == errors.UNKNOWN_REQUEST


async def test_a_left_request_stays_pending_for_another_client(tmp_path: Path) -> None:
    async def leave(method: str, params: dict[str, Any]) -> Any:
        return LEAVE

    start = {"providerId": "fake", "threadId": "thr_ask", "cwd": "/tmp", "options": {}}
    ask = {"providerId": "fake", "threadId": "thr_ask", "input": [], "clientRequestId": "creq_abcdefghjm"}
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (_, path):
        async with Client.connect(path, on_request=leave) as owner, Client.connect(path) as other:
            await owner.request("thread/start", start)
            await owner.request("turn/start", ask)
            with trio.fail_after(10):
                while not (await other.pending("thr_ask")).pending:
                    await trio.sleep(0.05)
            (pending,) = (await other.pending("thr_ask")).pending
            await other.respond(pending.requestId, {"kind": "user_answer", "answers": {}})
            with trio.fail_after(10):
                while (await other.pending("thr_ask")).pending or not (await other.pending("thr_ask")).resolved:
                    await trio.sleep(0.05)
            (resolved,) = (await other.pending("thr_ask")).resolved or []
            assert resolved.resolvedBy.startswith("socket-")


def test_under_asyncio_events_resume_across_a_daemon_restart(tmp_path: Path) -> None:
    socket, journal = tmp_path / "d.sock", tmp_path / "journal"
    serve = [sys.executable, "-m", "bbridge", "serve", "--socket", str(socket), "--journal", str(journal)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BB_")}

    def start_daemon() -> subprocess.Popen[bytes]:
        socket.unlink(missing_ok=True)
        return subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def main() -> list[int]:
        daemon = start_daemon()
        try:
            with anyio.fail_after(30):
                while not socket.exists():
                    await anyio.sleep(0.05)
            async with Client.connect(socket) as client:
                await client.request("thread/start", START)
                await client.request("turn/start", turn(1, "hello before"))
                seqs = await collect(client, 1)
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=30)
                daemon = start_daemon()  # same journal: seq continues

                async def second_turn() -> None:
                    with anyio.fail_after(30):
                        while not socket.exists():
                            await anyio.sleep(0.05)
                        async with Client.connect(socket) as driver:
                            await driver.request("thread/start", START)  # echo restores nothing: a new session
                            await driver.request("turn/start", turn(2, "hello after"))

                async with anyio.create_task_group() as group:
                    group.start_soon(second_turn)
                    seqs += await collect(client, 1, after=seqs[-1])
            return seqs
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)

    seqs = anyio.run(main, backend="asyncio")
    assert seqs == list(range(1, len(seqs) + 1))  # no gap and no duplicate across the restart


def completes(note: Notice) -> bool:
    batch = note.params
    return isinstance(batch, ThreadEventsNotification) and any(
        e.event["type"] == "turn/completed" for e in batch.events
    )


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_spawned_daemon_s_notifications_in_order_until_it_closes(backend: str, tmp_path: Path) -> None:
    """`notifications()` yields every notification in the daemon's order and ends with the connection; errors
    come out of the client's block as themselves, not in an exception group."""

    async def main() -> tuple[list[Notice], list[Notice]]:
        with pytest.raises(FileNotFoundError):
            async with Client.connect(tmp_path / "absent.sock"):
                pass
        seen: list[Notice] = []
        rest: list[Notice] = []
        with anyio.fail_after(30), pytest.raises(Disconnected):
            async with Client.spawn(SERVE) as client:
                await client.request("thread/start", START)
                await client.request("turn/start", turn(1, "hello notes"))
                async for note in client.notifications():
                    seen.append(note)
                    if completes(note):
                        break
                with pytest.raises(DaemonError) as refused:
                    await client.request("no/such/method")
                assert refused.value.code == rpc.METHOD_NOT_FOUND
                await client.request("shutdown")
                rest = [note async for note in client.notifications()]  # ends: the daemon closed the connection
                await client.status()  # a call after the close fails at once, out of the block as itself
        return seen, rest

    seen, rest = anyio.run(main, backend=backend)
    states = [note.params.state for note in seen if isinstance(note.params, BridgeStatus)]
    assert states == ["starting", "ready"]
    first_events = next(i for i, note in enumerate(seen) if note.method == "thread/events")
    assert all(note.method != "bridge/status" for note in seen[first_events:])  # the bridge was ready first
    seqs = [entry["seq"] for note in seen if note.method == "thread/events" for entry in note.raw["events"]]
    assert seqs == list(range(1, len(seqs) + 1))
    assert ("bridge/status", "exited") in [(note.method, note.raw.get("state")) for note in rest]


async def test_a_refused_token_is_a_daemon_error_from_connect(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}, token="s3cret") as (_, path):
        for token in (None, "guess"):
            with pytest.raises(DaemonError) as refused:
                async with Client.connect(path, token=token):
                    pass
            assert refused.value.code == errors.UNAUTHORIZED
        async with Client.connect(path, token="s3cret") as client:
            assert (await client.status()).daemon["name"] == "bbridge"


# answers `initialize`, then closes its stdout and reads on until stdin closes
HALF_CLOSED = """import json, os, sys
message = json.loads(sys.stdin.readline())
result = {"daemon": {"name": "half", "version": "0"}, "protocolVersion": 1, "grammarVersions": [3, 3], "providers": []}
print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
os.close(1)
sys.stdin.read()
"""


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_call_after_the_daemon_stopped_answering_fails_at_once(backend: str) -> None:
    """The daemon closed its side but still reads: a later call is `Disconnected`, not an answer waited for."""

    async def main() -> None:
        with anyio.fail_after(10):
            async with Client.spawn([sys.executable, "-c", HALF_CLOSED]) as client:
                with pytest.raises(Disconnected):
                    async for _ in client.notifications():  # ends when the daemon's side closes
                        pass
                    await client.status()

    anyio.run(main, backend=backend)


CREQ = re.compile(r"creq_[23456789a-km-z]{10}")  # the README's form (protocol.md §3.2)


def test_a_minted_client_request_id_has_the_protocol_s_form() -> None:
    minted = {client_request_id() for _ in range(2000)}
    assert len(minted) == 2000  # 50 random bits each
    for creq in minted:
        assert CREQ.fullmatch(creq), creq
        assert msgspec.convert(creq, ClientRequestId) == creq  # what the bridges decode turn/start with
    assert set("".join(creq[5:] for creq in minted)) == set("23456789abcdefghijkmnpqrstuvwxyz")


async def test_turn_start_and_steer_without_a_client_request_id_get_one_minted(tmp_path: Path) -> None:
    """The daemon (its bridge) refuses a turn without one; the client mints it, and the events carry it back."""
    hold = {key: value for key, value in turn(1, "hold hello").items() if key != "clientRequestId"}
    async with running(tmp_path, {"echo": echo_provider()}) as (_, path), Client.connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", hold)
        accepted: list[str] = []
        with anyio.fail_after(30):
            async for entry in client.events(THREAD):
                event = entry.event
                if event["type"] == "turn/input/accepted":
                    accepted.append(event["clientRequestId"])
                if event["type"] == "turn/started":
                    steer = {**hold, "input": [{"type": "text", "text": "finish", "mentions": []}]}
                    await client.request("turn/steer", {**steer, "expectedTurnId": event["scope"]["turnId"]})
                if event["type"] == "turn/completed":
                    break
    assert len(accepted) == 2 and len(set(accepted)) == 2, accepted
    assert all(CREQ.fullmatch(creq) for creq in accepted), accepted


async def test_a_refusal_s_text_says_the_reason_its_data_gives(tmp_path: Path) -> None:
    """`-32602 Invalid params for turn/start` keeps the reason in `data`; `str()` of the error shows it."""
    async with running(tmp_path, {"echo": echo_provider()}) as (_, path), Client.connect(path) as client:
        await client.request("thread/start", START)
        with pytest.raises(DaemonError) as refused:
            await client.request("turn/start", {**turn(1, "hello"), "clientRequestId": "creq_123"})
    assert refused.value.code == rpc.INVALID_PARAMS and refused.value.message == "Invalid params for turn/start"
    text = str(refused.value)
    assert text.startswith("Invalid params for turn/start (-32602): clientRequestId: Expected `str` matching regex")
    assert "creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}" in text


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (None, "Refused (-32000)"),
        ("the bridge is gone", "Refused (-32000): the bridge is gone"),
        ([{"path": ["input", 0, "text"], "message": "Expected `str`"}, {"path": [], "message": "two"}],
         "Refused (-32000): input.0.text: Expected `str`; two"),
        ({"answeredBy": "socket-1"}, 'Refused (-32000): {"answeredBy":"socket-1"}'),
        ("x" * 600, "Refused (-32000): " + "x" * 499 + "…"),
    ],
)  # fmt: skip
def test_the_reason_in_a_daemon_error_s_text(data: Any, text: str) -> None:
    error = DaemonError(-32000, "Refused", data)
    assert (str(error), error.message, error.data) == (text, "Refused", data)
