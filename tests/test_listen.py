"""`serve --listen`: the routes, who may use them (token, Host, Origin, exposure), and the bounds that keep one
bad peer from hurting the others (slow heads, oversized messages, silent peers, connections at once)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from bbridge.daemon.config import echo_provider
from bbridge.listen.admission import Address, Admission, check_exposure
from bbridge.listen.face import ListenSettings
from bbridge.wire.websocket import HandshakeError
from tests.listen_support import TOKEN, WsPeer, http_get, listening, read_all
from tests.support import FULL

PROVIDERS = {"echo": echo_provider()}
BEARER = {"Authorization": f"Bearer {TOKEN}"}
SETTINGS = ListenSettings(Address("127.0.0.1", 0))


async def run_turn(peer: WsPeer, thread_id: str, text: str = "hello") -> list[dict[str, Any]]:
    """Start a thread on the echo bridge and run one turn; the events up to its `turn/completed`."""
    start = {"providerId": "echo", "threadId": thread_id, "cwd": "/tmp", "options": FULL}
    assert "result" in await peer.call(2, "thread/start", start), "thread/start failed"
    turn = {"providerId": "echo", "threadId": thread_id, "clientRequestId": "creq_abcdefghj2", "options": FULL,
            "input": [{"type": "text", "text": text, "mentions": []}]}  # fmt: skip
    assert "result" in await peer.call(3, "turn/start", turn)
    events: list[dict[str, Any]] = []
    while True:
        message = await peer.receive()
        assert message is not None, "the connection closed mid-turn"
        if message.get("method") == "thread/events":
            events += [entry["event"] for entry in message["params"]["events"]]
            if any(event["type"] == "turn/completed" for event in events):
                return events


async def test_health_ready_and_nothing_elsewhere() -> None:
    async with listening(PROVIDERS) as face:
        assert (await http_get(face.port, "/healthz"))[::2] == (200, b"ok\n")
        assert (await http_get(face.port, "/readyz"))[::2] == (200, b"ready\n")
        assert (await http_get(face.port, "/nothing"))[0] == 404
        face.daemon.journal.health_counts.write_errors = 1
        face.daemon.journal.health_counts.last_error = "thr_x: No space left on device"
        status, _, body = await http_get(face.port, "/readyz")
        assert status == 503 and b"No space left on device" in body


async def test_metrics_need_the_token_and_parse_as_prometheus_text() -> None:
    async with listening(PROVIDERS) as face:
        status, headers, _ = await http_get(face.port, "/metrics")
        assert status == 401 and headers["www-authenticate"].startswith("Bearer")
        assert (await http_get(face.port, "/metrics", {"Authorization": "Bearer wrong"}))[0] == 401
        peer = await WsPeer.connect(face.port, BEARER)
        assert "result" in await peer.call(1, "initialize", {})
        await run_turn(peer, "thr_metrics")
        status, headers, body = await http_get(face.port, "/metrics", BEARER)
        assert status == 200 and headers["content-type"].startswith("text/plain")
        families = {family.name: family for family in text_string_to_metric_families(body.decode())}
        value = {f"{s.name}{sorted(s.labels.items())}": s.value for f in families.values() for s in f.samples}
        assert value["bbridge_threads[]"] == 1
        assert value["bbridge_clients[('transport', 'ws')]"] == 1
        assert value["bbridge_bridges[('state', 'ready')]"] == 1
        assert value["bbridge_events_delivered_total[]"] > 0
        assert value["bbridge_turn_duration_seconds_count[('provider', 'echo')]"] == 1
        assert value["bbridge_turn_duration_seconds_bucket[('le', '+Inf'), ('provider', 'echo')]"] == 1
        for name in ("bbridge_open_turns", "bbridge_pending_interactions", "bbridge_notifications_refused",
                     "bbridge_tool_calls_refused", "bbridge_journal_write_errors"):  # fmt: skip
            assert name in families, name
        await peer.aclose()


async def test_a_turn_over_websocket_with_the_token_in_initialize() -> None:
    async with listening(PROVIDERS) as face:
        peer = await WsPeer.connect(face.port)
        refused = await peer.call(1, "daemon/status")
        assert refused["error"]["message"].startswith("send initialize with the daemon's token")
        assert "result" in await peer.call(1, "initialize", {"token": TOKEN})
        events = await run_turn(peer, "thr_ws")
        assert events[0]["type"] == "thread/started" or any(e["type"] == "turn/started" for e in events)
        await peer.aclose()


async def test_a_connection_without_the_token_is_refused_and_closed() -> None:
    async with listening(PROVIDERS) as face:
        with pytest.raises(HandshakeError) as refused:
            await WsPeer.connect(face.port, {"Authorization": "Bearer wrong"})
        assert refused.value.status == 401
        peer = await WsPeer.connect(face.port)
        answer = await peer.call(1, "initialize", {"token": "wrong"})
        assert answer["error"]["message"].startswith("initialize needs the daemon's token")
        assert await peer.receive() is None  # closed after the refusal
        await peer.aclose()


async def test_origin_and_host_are_checked() -> None:
    settings = replace(SETTINGS, allow_origins=frozenset({"https://ide.example"}), allow_hosts=frozenset({"bb.lan"}))
    async with listening(PROVIDERS, settings) as face:
        with pytest.raises(HandshakeError) as cross:
            await WsPeer.connect(face.port, {"Origin": "http://evil.example", **BEARER})
        assert cross.value.status == 403
        for origin in (f"http://127.0.0.1:{face.port}", "https://ide.example"):
            peer = await WsPeer.connect(face.port, {"Origin": origin, **BEARER})
            assert "result" in await peer.call(1, "initialize", {})
            await peer.aclose()
        with pytest.raises(HandshakeError) as rebound:
            await WsPeer.connect(face.port, BEARER, host=f"attacker.example:{face.port}")
        assert rebound.value.status == 403
        assert (await http_get(face.port, "/healthz", {"Host": "attacker.example"}))[0] == 403
        for host in (f"localhost:{face.port}", "bb.lan"):
            assert (await http_get(face.port, "/healthz", {"Host": host}))[0] == 200


def test_admission_rules() -> None:
    wildcard = Admission(Address("0.0.0.0", 80), "https", TOKEN)
    assert wildcard.host_refusal("10.1.2.3:80") is None
    assert wildcard.host_refusal("rebound.example") is not None
    loopback = Admission(Address("::1", 8), "http", None)
    assert loopback.host_refusal("[::1]:8") is None and loopback.host_refusal("localhost:8") is None
    assert loopback.bearer("Bearer anything") is False and loopback.bearer(None) is None
    assert loopback.origin_refusal(None, "[::1]:8") is None
    assert check_exposure(Address("127.0.0.1", 1), token=False, tls=False, insecure=False) is None
    refusal = check_exposure(Address("0.0.0.0", 1), token=True, tls=False, insecure=False)
    assert refusal is not None and "--tls-cert" in refusal and "--token-file" not in refusal
    assert check_exposure(Address("0.0.0.0", 1), token=False, tls=False, insecure=True) is None


def test_serve_refuses_a_non_loopback_listen_without_tls_and_token(tmp_path: Path) -> None:
    serve = [sys.executable, "-m", "bbridge", "serve", "--listen", "0.0.0.0:0"]
    done = subprocess.run(serve, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token-file and --tls-cert and --tls-key" in lines[0], done.stderr


async def test_a_slow_head_is_cut_off_while_another_client_streams_on() -> None:
    async with listening(PROVIDERS, replace(SETTINGS, head_s=0.5)) as face:
        slow = await trio.open_tcp_stream("127.0.0.1", face.port)
        await slow.send_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: ")
        peer = await WsPeer.connect(face.port, BEARER)
        assert "result" in await peer.call(1, "initialize", {})
        await run_turn(peer, "thr_streaming")
        with trio.fail_after(5):
            assert await read_all(slow) == b""  # closed unanswered
        await slow.aclose()
        await peer.aclose()


async def test_oversized_binary_and_doubled_messages_get_the_socket_s_answers() -> None:
    async with listening(PROVIDERS, replace(SETTINGS, max_message_bytes=4096)) as face:
        peer = await WsPeer.connect(face.port, BEARER)
        await peer.send({"jsonrpc": "2.0", "id": 7, "method": "daemon/status", "params": {"pad": "x" * 10_000}})
        oversized = await peer.receive()
        assert oversized is not None and oversized["id"] == 7 and oversized["error"]["code"] == -32600
        await peer.send_binary(b'{"jsonrpc":"2.0","id":8}')
        binary = await peer.receive()
        assert binary is not None and binary["id"] == 8 and "text frame" in binary["error"]["message"]
        await peer.send(b'{"jsonrpc":"2.0","id":9,"method":"daemon/status"}\n{"jsonrpc":"2.0","id":10}')
        doubled = await peer.receive()
        assert doubled is not None and doubled["id"] == 9 and doubled["error"]["code"] == -32700
        assert "result" in await peer.call(11, "daemon/status")  # the connection stays
        await peer.aclose()


async def test_a_peer_that_stops_answering_pings_is_closed() -> None:
    async with listening(PROVIDERS, replace(SETTINGS, ping_s=0.2, pong_timeout_s=0.2)) as face:
        silent = await WsPeer.connect(face.port, BEARER)  # never reads, so never answers a ping
        alive = await WsPeer.connect(face.port, BEARER)
        assert "result" in await alive.call(1, "initialize", {})
        with trio.fail_after(5):
            while len(face.daemon.fanout.clients) > 1:
                with trio.move_on_after(0.05):  # the live peer answers pings as it reads
                    await alive.receive()
        assert face.daemon.status()["daemon"]["clientsByTransport"] == {"ws": 1}
        await silent.aclose()
        await alive.aclose()


async def test_connections_over_the_limit_get_503() -> None:
    async with listening(PROVIDERS, replace(SETTINGS, max_connections=2)) as face:
        held = [await WsPeer.connect(face.port, BEARER) for _ in range(2)]
        status, _, body = await http_get(face.port, "/healthz")
        assert status == 503 and b"too many connections" in body
        for peer in held:
            await peer.aclose()


async def test_a_thousand_connections_opened_and_dropped_leave_no_descriptor() -> None:
    async with listening(PROVIDERS) as face:
        await http_get(face.port, "/healthz")  # everything lazily made is made
        before = len(os.listdir("/proc/self/fd"))

        async def one(n: int) -> None:
            if n % 2:
                peer = await WsPeer.connect(face.port, BEARER)
                await peer.aclose()
            else:
                stream = await trio.open_tcp_stream("127.0.0.1", face.port)
                await stream.send_all(b"GET /healthz HTTP/1.1\r\n")  # dropped mid-head
                await stream.aclose()

        for batch in range(10):
            async with trio.open_nursery() as nursery:
                for n in range(100):
                    nursery.start_soon(one, batch * 100 + n)
        with trio.fail_after(10):
            while len(os.listdir("/proc/self/fd")) > before or face.daemon.fanout.clients:
                await trio.sleep(0.05)
