"""Client transports: `bbridge serve` on stdio and on a Unix socket, tokens, socket hygiene."""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from bbridge.daemon.server import open_socket_listener
from bbridge.wire import errors, rpc
from tests.support import FULL, connect, fake_provider, running

START = {"providerId": "echo", "threadId": "thr_stdio", "cwd": "/tmp"}


class _Lines:
    """Reads a child's stdout line by line with a deadline, so a stuck daemon fails the test instead of hanging it."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline_s: float = 30) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""
        self.deadline = time.monotonic() + deadline_s

    def __call__(self) -> dict[str, object]:
        while b"\n" not in self.buffer:
            remaining = self.deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(remaining, 0))
            if not ready:
                raise AssertionError("the daemon said nothing before the deadline")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise AssertionError("the daemon closed stdout")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]


def test_serve_on_stdio_runs_the_echo_provider_and_shuts_down(tmp_path: Path) -> None:
    log = (tmp_path / "stderr.log").open("wb")  # a pipe nobody drains would block the daemon's logging
    proc = subprocess.Popen(
        [sys.executable, "-m", "bbridge", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    assert proc.stdin is not None
    read_line = _Lines(proc)

    def send(message: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def until_response(request_id: int) -> dict[str, object]:
        while True:
            message = read_line()
            if message.get("id") == request_id:
                return message
            seen.append(message)

    seen: list[dict[str, object]] = []
    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"client": {"name": "t", "version": "1"}, "protocolVersion": 1},
            }
        )
        init = until_response(1)["result"]
        assert isinstance(init, dict) and {"providerId": "echo", "state": "idle"} in init["providers"]  # type: ignore[operator]
        send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "thread/start",
                "params": {**START, "options": {**FULL, "envVars": {}}},
            }
        )
        assert "result" in until_response(2)
        turn = {
            "threadId": "thr_stdio",
            "providerId": "echo",
            "clientRequestId": "creq_abcdefghjk",
            "options": {**FULL, "envVars": {}},
        }
        send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "turn/start",
                "params": {**turn, "input": [{"type": "text", "text": "hi", "mentions": []}]},
            }
        )
        until_response(3)
        events: list[dict[str, object]] = []  # the echo turn may stream before turn/start's answer arrives
        for message in seen:
            if message.get("method") == "thread/events":
                events.extend(message["params"]["events"])  # type: ignore[index]
        while not any(e["event"]["type"] == "turn/completed" for e in events):  # type: ignore[index]
            message = read_line()
            if message.get("method") == "thread/events":
                events.extend(message["params"]["events"])  # type: ignore[index]
        send({"jsonrpc": "2.0", "id": 4, "method": "shutdown", "params": {}})
        assert until_response(4)["result"] == {}
        assert proc.wait(timeout=20) == 0
        log.close()
        stderr = (tmp_path / "stderr.log").read_text()
        assert all(line.startswith("{") for line in stderr.splitlines() if line), (
            "logs are JSON lines on a non-terminal"
        )
    finally:
        proc.kill()
        proc.wait()


async def test_socket_is_private_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "run" / "d.sock"
    path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a socket file nobody listens on
    listener = await open_socket_listener(path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with pytest.raises(OSError, match="another daemon is listening"):
            await open_socket_listener(path)
    finally:
        await listener.aclose()


async def test_a_created_socket_directory_is_private(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "d.sock"
    listener = await open_socket_listener(path)
    await listener.aclose()
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


async def test_token_is_required_when_configured(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}, token="s3cret") as (daemon, path):
        async with connect(path) as client:
            with pytest.raises(rpc.RpcError) as caught:
                await client.request("daemon/status", {})
            assert caught.value.code == errors.UNAUTHORIZED
            with pytest.raises(rpc.RpcError) as caught:
                await client.request("initialize", {"token": "wrong"})
            assert caught.value.code == errors.UNAUTHORIZED
        async with connect(path) as client:
            await client.request("initialize", {"token": "s3cret"})
            status = await client.request("daemon/status", {})
            assert status["daemon"]["name"] == "bbridge"


async def test_a_connection_that_has_not_proved_the_token_hears_nothing(tmp_path: Path) -> None:
    """On a daemon with a token, a connection hears events, inputs and bridge status only once its `initialize`
    carried the token: another client's prompt and timeline never reach it before (nor after a wrong token)."""
    async with running(tmp_path, {"fake": fake_provider()}, token="s3cret") as (daemon, path):
        async with connect(path) as idle, connect(path) as wrong, connect(path) as owner:
            with pytest.raises(rpc.RpcError):
                await wrong.request("initialize", {"token": "nope"})
            await owner.request("initialize", {"token": "s3cret"})
            await owner.request("thread/start", {"providerId": "fake", "threadId": "thr_t", "cwd": "/tmp"})
            turn = {"threadId": "thr_t", "clientRequestId": "creq_abcdefghjk", "input": [{"type": "text", "text": "x"}]}
            await owner.request("turn/start", turn)
            await owner.wait_for(lambda: "turn/completed" in owner.types("thr_t"))
            assert owner.notes and owner.events("thr_t")  # the owner heard its thread/input, bridge status, events
            assert idle.notes == [] and idle.entries == {} and wrong.notes == [] and wrong.entries == {}
            await idle.request("initialize", {"token": "s3cret"})
            await owner.request("turn/start", {**turn, "clientRequestId": "creq_abcdefghjm"})
            await idle.wait_for(lambda: "turn/completed" in idle.types("thr_t"))  # from now on it hears all


async def test_status_reports_providers_threads_and_counters(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("silent-turn")}) as (daemon, path), connect(path) as client:
        await client.request("thread/start", {"providerId": "fake", "threadId": "thr_s", "cwd": "/tmp"})
        await client.request(
            "turn/start", {"providerId": "fake", "threadId": "thr_s", "clientRequestId": "creq_abcdefghjk"}
        )
        await client.wait_for(lambda: "turn/started" in client.types("thr_s"))
        status = await client.request("daemon/status", {})
        provider = next(p for p in status["providers"] if p["providerId"] == "fake")
        assert provider["state"] == "ready" and provider["pid"] > 0
        thread = next(t for t in status["threads"] if t["threadId"] == "thr_s")
        assert len(thread["openTurns"]) == 1 and thread["lastSeq"] == len(client.entries["thr_s"])
        assert thread["providerThreadId"] == "prov-thr_s"
        assert status["counters"]["deltas_in"] > 0


async def test_a_client_vanishing_mid_stream_stops_nothing(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path):
        stream = await trio.open_unix_socket(str(path))
        await stream.send_all(
            b'{"jsonrpc":"2.0","id":1,"method":"thread/start","params":{"providerId":"fake","threadId":"thr_v","cwd":"/"}}\n'
        )
        await stream.aclose()
        async with connect(path) as client:
            await client.request(
                "turn/start", {"providerId": "fake", "threadId": "thr_v", "clientRequestId": "creq_abcdefghjk"}
            )
            replay_done = False
            with trio.fail_after(10):
                while not replay_done:
                    replay = await client.request("thread/events", {"threadId": "thr_v", "afterSeq": 0})
                    replay_done = any(e["event"]["type"] == "turn/completed" for e in replay["events"])
                    await trio.sleep(0.05)
            assert daemon.supervisor.bridges["fake"].state == "ready"


def test_a_stdio_client_that_closes_stdin_right_away_still_gets_every_answer(tmp_path: Path) -> None:
    """EOF on stdin ends the session, but only after the requests already read are answered (drained)."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "daemon/status"},
        {"jsonrpc": "2.0", "id": 3, "method": "model/list", "params": {"providerId": "echo"}},  # spawns a bridge
    ]
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-m", "bbridge", "serve"],
            input=b"".join(json.dumps(r).encode() + b"\n" for r in requests),
            capture_output=True,
            timeout=60,
        )
        answers = [json.loads(line) for line in done.stdout.splitlines() if b'"id"' in line]
        assert sorted(answer["id"] for answer in answers) == [1, 2, 3], done.stderr[-2000:]
        assert all("result" in answer for answer in answers)
