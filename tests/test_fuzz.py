"""Seeded fuzz of the daemon (issue 10): client junk, bridge junk, deep nesting, oversize lines, reconnects.

Briefly in `make test`; long in `make soak` (`BBRIDGE_FUZZ_ROUNDS`, `BBRIDGE_FUZZ_SEED`). Invariants: the daemon
never dies; every client line that carries a readable id is answered exactly once, with the code its defect
calls for; a well-behaved turn next to a junk-spewing bridge completes with contiguous seqs; nothing leaks
between connections.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from bbridge.wire import errors, framing, rpc
from tests.support import connect, fake_provider, running

SEED = int(os.environ.get("BBRIDGE_FUZZ_SEED", "20261130"))
ROUNDS = int(os.environ.get("BBRIDGE_FUZZ_ROUNDS", "12"))  # connections, each with a batch of lines
LINES_PER_ROUND = 40
OVERSIZE_EVERY = 6  # rounds: a 65 MiB line costs ~0.1 s
START = {"providerId": "fake", "cwd": "/tmp", "options": {}}


def client_line(rng: random.Random, n: int, round_: int) -> tuple[bytes, Any, int | None]:
    """One line, the id the daemon must answer (None: no answer), and the error code expected (None: a result)."""
    id_: Any = rng.choice((n, f"r{round_}-{n}", n + 0.5))
    head = b'{"jsonrpc":"2.0","id":' + json.dumps(id_).encode()
    kind = rng.randrange(12)
    if kind == 0:
        return head + b',"method":"daemon/status"}', id_, None
    if kind == 1:
        return head + b',"method":"bad\xff\xfe"}', id_, rpc.PARSE_ERROR
    if kind == 2:
        depth = rng.choice((257, 1000, 50_000))
        return (
            head + b',"method":"daemon/status","params":' + b"[" * depth + b"]" * depth + b"}",
            id_,
            rpc.INVALID_REQUEST,
        )
    if kind == 3:
        return head + b',"method":"no/such/method","params":{}}', id_, rpc.METHOD_NOT_FOUND
    if kind == 4:
        return head + b',"method":"daemon/status","params":[1,2]}', id_, rpc.INVALID_PARAMS
    if kind == 5:
        return head + b',"method":7}', id_, rpc.INVALID_REQUEST
    if kind == 6:
        return head + b',"method":"thread/events","params":{"threadId":5}}', id_, rpc.INVALID_PARAMS
    if kind == 7:
        return head + b',"method":"turn/start","params":{"threadId":"nobody"}}', id_, rpc.INVALID_PARAMS
    if kind == 8:
        return head + b',"method":"model/list","params":{"providerId":"ghost"}}', id_, errors.UNKNOWN_PROVIDER
    if kind == 9:  # random bytes: never answered
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 80))).replace(b"\n", b" "), None, None
    if kind == 10:  # a notification of junk
        return b'{"jsonrpc":"2.0","method":"x","params":' + b"{" * 300 + b"}" * 300 + b"}", None, None
    return b'{"jsonrpc":"2.0","id":null,"method":"daemon/status"}', None, None


async def read_answers(stream: trio.SocketStream, probe: str) -> list[dict[str, Any]]:
    reader, answers = framing.LineReader(), []
    with trio.fail_after(30):
        while True:
            data = await stream.receive_some()
            assert data, "the daemon closed the connection"
            for line in reader.feed(data):
                assert isinstance(line, bytes)
                message = json.loads(line)
                if "id" not in message:
                    continue  # thread/events and other notifications
                answers.append(message)
                if message["id"] == probe:
                    return answers


async def test_seeded_client_and_bridge_junk_never_hurt_the_daemon(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    async with running(tmp_path, {"fake": fake_provider("junk")}) as (daemon, path):
        async with connect(path) as steady:  # a well-behaved client with a turn on a junk-spewing bridge
            await steady.request("thread/start", {**START, "threadId": "thr_steady"})
            expected: Counter[str] = Counter()
            for round_ in range(ROUNDS):
                stream = await trio.open_unix_socket(str(path))
                lines = [b'{"jsonrpc":"2.0","id":"init","method":"initialize","params":{}}']
                want: dict[Any, int | None] = {"init": None}
                for n in range(LINES_PER_ROUND):
                    line, id_, code = client_line(rng, n, round_)
                    lines.append(line)
                    if id_ is not None:
                        want[id_] = code
                        expected["error" if code is not None else "result"] += 1
                    else:
                        expected["unanswered"] += 1
                if round_ % OVERSIZE_EVERY == 0:
                    lines.append(b'{"jsonrpc":"2.0","id":"big","method":"x","params":"' + b"z" * (65 * 2**20) + b'"}')
                    want["big"] = rpc.INVALID_REQUEST
                probe = f"probe-{round_}"
                lines.append(b'{"jsonrpc":"2.0","id":"' + probe.encode() + b'","method":"daemon/status"}')
                want[probe] = None
                await stream.send_all(b"\n".join(lines) + b"\n")
                answers = await read_answers(stream, probe)
                got = [answer["id"] for answer in answers]
                assert sorted(map(str, got)) == sorted(map(str, want)), "every readable id answered exactly once"
                for answer in answers:
                    code = want[answer["id"]]
                    assert (answer.get("error") or {}).get("code") == code, answer
                await stream.aclose()  # and the next round is a reconnecting client
                creq = f"creq_abcdefghj{'mnpqrstuvw'[round_ % 10]}"
                await steady.request("turn/start", {"threadId": "thr_steady", "input": [], "clientRequestId": creq})
            await steady.wait_for(lambda: steady.types("thr_steady").count("turn/completed") == ROUNDS, timeout=60)
            seqs = [entry["seq"] for entry in steady.entries["thr_steady"]]
            assert seqs == list(range(1, len(seqs) + 1))
            status = await steady.request("daemon/status")
            assert status["daemon"]["clients"] == 1
            assert {p["providerId"]: p["state"] for p in status["providers"]}["fake"] == "ready"
            assert daemon.counters.failed_notifications == 0
            assert daemon.counters.rejected_bridge_requests > 0 and daemon.counters.rejected_notifications > 0
