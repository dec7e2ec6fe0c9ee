"""Clients of `bbridge serve --listen`: `bbridge.client` over `ws://` and `wss://` (a self-signed certificate made
here, checked with `ca_file`), a third-party WebSocket client (`websockets`), and the command line's `--url`.
Each runs a turn on the echo bridge; the Python client's drops its connection and resumes with `afterSeq`."""

from __future__ import annotations

import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as websockets_connect

from bbridge.client import Client, DaemonError
from bbridge.daemon.config import echo_provider
from bbridge.listen.admission import Address
from bbridge.listen.face import ListenSettings
from bbridge.wire import errors
from tests import listen_support
from tests.support import FULL

TOKEN = "t0ken-" + "a" * 26
THREAD = "thr_ws"
START = {"providerId": "echo", "threadId": THREAD, "cwd": "/tmp", "options": FULL}
PROMPT = "approve:command slow:50 the sea is wide and the sea is deep"
ECHOED = f"echo: {PROMPT}"


def turn(text: str, creq: str = "creq_wsabcdefgh") -> dict[str, Any]:
    return {"providerId": "echo", "threadId": THREAD, "clientRequestId": creq, "options": {**FULL, "envVars": {}},
            "input": [{"type": "text", "text": text, "mentions": []}]}  # fmt: skip


@asynccontextmanager
async def listening(token: str | None = TOKEN, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """An in-process daemon (the echo provider) behind a listener on 127.0.0.1, port 0: its `ws(s)://` URL."""
    settings = ListenSettings(Address("127.0.0.1", 0), tls=tls)
    async with listen_support.listening({"echo": echo_provider()}, settings, token=token) as face:
        yield face.url.removesuffix("/rpc")


async def allow(method: str, params: dict[str, Any]) -> Any:
    assert params["payload"]["kind"] == "approval"
    return {"decision": "allow_once", "grantedPermissions": None}


async def turn_dropped_and_resumed(client: Client) -> tuple[list[int], str]:
    """A turn that asks an approval, the connection dropped at its first delta, the rest after the reconnect."""
    await client.request("thread/start", START)
    await client.request("turn/start", turn(PROMPT))
    seqs: list[int] = []
    text = ""
    dropped = False
    with anyio.fail_after(30):
        async for entry in client.events(THREAD):
            seqs.append(entry.seq)
            if entry.event["type"] == "item/agentMessage/delta":
                text += entry.event["delta"]
                if not dropped:
                    dropped = True
                    assert client._link is not None
                    await client._link.stream.aclose()  # the iterator reconnects and resumes after this seq
            if entry.event["type"] == "turn/completed":
                assert entry.event["status"] == "completed"
                break
    assert dropped
    return seqs, text


async def test_the_python_client_over_ws_resumes_with_after_seq() -> None:
    async with listening() as url, Client.connect(url, token=TOKEN, on_request=allow) as client:
        assert (await client.status()).daemon["name"] == "bbridge"
        seqs, text = await turn_dropped_and_resumed(client)
        assert seqs == list(range(1, len(seqs) + 1)) and text == ECHOED
        assert (await client.status()).daemon["clientsByTransport"] == {"ws": 1}  # the dropped one is gone


async def test_a_refused_upgrade_is_a_daemon_error_naming_the_status_and_what_to_do() -> None:
    async with listening() as url:
        with pytest.raises(DaemonError) as refused:
            async with Client.connect(url, token="not-the-token"):
                pass
        assert refused.value.code == errors.UNAUTHORIZED
        assert str(refused.value) == (
            "the server refused the WebSocket upgrade: 401 the bearer token is not the daemon's (see --token-file); "
            "pass the token in the daemon's serve --token-file (-32016)"
        )
        with pytest.raises(DaemonError) as missing:  # no header: the upgrade is a browser's, initialize refuses
            async with Client.connect(url):
                pass
        assert missing.value.code == errors.UNAUTHORIZED


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, made by openssl."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return cert, key


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if subprocess.run(["which", "openssl"], capture_output=True).returncode != 0:
        pytest.skip("openssl is not installed: no certificate to test TLS with")
    return self_signed(tmp_path_factory.mktemp("tls"))


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_the_python_client_over_wss_with_a_ca_file(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    async with listening(tls=server_context(cert, key)) as url:
        assert url.startswith("wss://")
        with pytest.raises(ssl.SSLCertVerificationError):  # not signed by a CA the system knows
            async with Client.connect(url, token=TOKEN):
                pass
        async with Client.connect(url, token=TOKEN, ca_file=cert, on_request=allow) as client:
            seqs, text = await turn_dropped_and_resumed(client)
        assert seqs == list(range(1, len(seqs) + 1)) and text == ECHOED


def third_party_turn(url: str) -> tuple[list[dict[str, Any]], int]:
    """`websockets` (sync) runs a turn: the token in `initialize`, an approval answered, every line one text frame."""
    events: list[dict[str, Any]] = []
    approvals = 0
    with websockets_connect(f"{url}/rpc", open_timeout=10, close_timeout=5) as ws:

        def call(ident: int, method: str, params: dict[str, Any]) -> None:
            ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))

        client = {"name": "websockets", "version": "3rd-party"}
        steps = iter([("initialize", {"protocolVersion": 1, "client": client, "token": TOKEN}),
                      ("thread/start", START), ("turn/start", turn("approve:command hello from websockets"))])  # fmt: skip
        ident = 1
        call(ident, *next(steps))
        for _ in range(500):  # bounded: the turn is a few dozen messages
            message = json.loads(ws.recv(timeout=15))
            if message.get("method") == "interaction/request":
                approvals += 1
                answer = {"decision": "allow_once", "grantedPermissions": None}
                ws.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": answer}))
            elif message.get("id") == ident and "method" not in message:
                assert "result" in message, message
                step = next(steps, None)
                if step is not None:
                    ident += 1
                    call(ident, *step)
            elif message.get("method") == "thread/events":
                events += [entry["event"] for entry in message["params"]["events"]]
                if events[-1]["type"] == "turn/completed":
                    return events, approvals
    raise AssertionError(f"the turn did not complete: {[event['type'] for event in events]}")


async def test_a_third_party_websocket_client_runs_a_turn_on_the_echo_bridge() -> None:
    async with listening() as url:
        events, approvals = await trio.to_thread.run_sync(third_party_turn, url)
        with pytest.raises(InvalidStatus) as refused:  # and a wrong bearer token is refused at the upgrade
            await trio.to_thread.run_sync(
                lambda: websockets_connect(f"{url}/rpc", additional_headers={"Authorization": "Bearer no"}).close()
            )
    assert refused.value.response.status_code == 401
    assert approvals == 1
    assert events[-1]["type"] == "turn/completed" and events[-1]["status"] == "completed"
    text = "".join(event["delta"] for event in events if event["type"] == "item/agentMessage/delta")
    assert text == "echo: approve:command hello from websockets"


# -- the command line's --url, against a `bbridge serve --listen` child ------------------------------------------


@contextmanager
def serve_listening(tmp_path: Path, *options: str) -> Iterator[tuple[str, Path]]:
    """`bbridge serve --listen 127.0.0.1:0 --token-file F`: its URL (from the `listening` log line) and F."""
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BB_")}
    argv = [sys.executable, "-m", "bbridge", "serve", "--listen", "127.0.0.1:0", "--token-file", str(token),
            "--log-format", "json", "--flush-ms", "0", *options]  # fmt: skip
    serve_process = subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        assert serve_process.stderr is not None
        url = None
        for _ in range(50):  # the first lines of the log: the listening line comes before any client
            line = serve_process.stderr.readline()
            if not line:
                break
            record = json.loads(line)
            if record.get("event") == "listening":
                url = record["url"].replace("http", "ws", 1)
                break
        assert url is not None, "bbridge serve --listen logged no listening url"
        threading.Thread(target=serve_process.stderr.read, daemon=True).start()  # a full pipe would stall it
        yield url, token
    finally:
        serve_process.terminate()
        serve_process.wait(timeout=30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve_listening(tmp_path) as url_and_token:
        yield url_and_token


def bbridge(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bbridge", *argv], capture_output=True, text=True, timeout=60)


def test_the_python_client_over_ws_under_asyncio(served: tuple[str, Path]) -> None:
    url, token_file = served

    async def main() -> tuple[list[int], str]:
        async with Client.connect(url, token=token_file.read_text().strip(), on_request=allow) as client:
            return await turn_dropped_and_resumed(client)

    seqs, text = anyio.run(main, backend="asyncio")
    assert seqs == list(range(1, len(seqs) + 1)) and text == ECHOED


def test_status_run_and_tail_take_url(served: tuple[str, Path]) -> None:
    url, token = served
    status = bbridge("status", "--url", url, "--token-file", str(token), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["daemon"]["clientsByTransport"] == {"ws": 1}
    ran = bbridge("run", "--url", url, "--token-file", str(token), "--provider", "echo", "--prompt", "hi over ws",
                  "--json")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    events = [json.loads(line) for line in ran.stdout.splitlines()]
    thread = events[0]["threadId"]
    assert events[-1]["type"] == "turn/completed" and events[-1]["status"] == "completed"
    tail = subprocess.Popen([sys.executable, "-m", "bbridge", "tail", "--url", url, "--token-file", str(token),
                             "--thread", thread, "--json"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert tail.stdout is not None
        tailed = [json.loads(tail.stdout.readline()) for _ in events]  # the journal's replay: the same events
    finally:
        tail.send_signal(signal.SIGINT)  # the tail follows until Ctrl-C
        assert tail.wait(timeout=30) == 0
    assert [record["event"] for record in tailed] == events
    pending = bbridge("pending", "--url", url, "--token-file", str(token), "--json")
    assert (pending.returncode, json.loads(pending.stdout)["pending"]) == (0, []), pending.stderr
    stopped = bbridge("stop", "--url", url, "--token-file", str(token), thread)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"stopped {thread} (echo): released it (no turn was open)\n"
    refused = bbridge("status", "--url", url)
    assert refused.returncode == 1
    assert "refused a client without a token (see --token-file)" in refused.stderr, refused.stderr
    (token.parent / "wrong").write_text("not-the-token\n")
    wrong = bbridge("status", "--url", url, "--token-file", str(token.parent / "wrong"))
    assert wrong.returncode == 1
    assert (
        f"bbridge status: the daemon on {url} refused the token given: the server refused the WebSocket upgrade: 401"
        in wrong.stderr
    )
    both = bbridge("status", "--url", url, "--socket", "/nowhere.sock")
    assert both.returncode == 2 and "--socket" in both.stderr and "--url" in both.stderr
    with_ca = bbridge("status", "--url", url, "--ca-file", str(token))
    assert with_ca.returncode == 2 and "--ca-file is for a wss:// --url" in with_ca.stderr


def test_the_command_line_over_wss_with_ca_file(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    with serve_listening(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)) as (url, token):
        assert url.startswith("wss://")
        status = bbridge("status", "--url", url, "--token-file", str(token), "--ca-file", str(cert), "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["daemon"]["clientsByTransport"] == {"ws": 1}
        untrusted = bbridge("status", "--url", url, "--token-file", str(token))
    assert untrusted.returncode == 1
    assert f"bbridge status: the TLS certificate of {url} is not trusted" in untrusted.stderr, untrusted.stderr
    assert "give its CA (--ca-file)" in untrusted.stderr
