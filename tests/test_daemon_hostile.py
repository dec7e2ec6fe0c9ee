"""The daemon end to end against hostile input (issue 10): garbage and oversized lines, invalid deltas, bad JSON
from a client, deeply nested lines, malformed bridge requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio
import trio.testing

from bbridge.core import native
from bbridge.wire import rpc
from tests.daemon_turns import START, THREAD, completed, turn
from tests.support import connect, fake_provider, running


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
