"""The daemon end to end, from a bridge's read to the clients: payloads as JavaScript writes them, extension
schemas, slow clients and the order of answers and events, a read's first events first, many threads at work,
a notification that fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from bbridge.bench import stream
from bbridge.core import grammar
from bbridge.core.event_log import Delivery
from bbridge.daemon import delivery, runtime
from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.config import ExtensionKind, ProviderConfig
from bbridge.wire import rpc
from tests.daemon_turns import START, THREAD, completed, turn
from tests.support import connect, fake_provider, running


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
    from bbridge.daemon.server import ClientConnection

    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        ours, theirs = trio.testing.lockstep_stream_pair()  # writes block until the peer reads: it never does
        slow = ClientConnection(daemon, ours, ours, "slow", queue_bytes=600)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.run)
            while slow not in daemon.fanout.clients:
                await trio.sleep(0.01)
            await client.request("thread/start", START)
            await client.request("turn/start", turn())
            await client.wait_for(lambda: completed(client))
            assert slow not in daemon.fanout.clients
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
    from bbridge.daemon.server import ClientConnection

    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path):
        socket_out = _GatedSend()
        requests_in, client_in = trio.testing.memory_stream_one_way_pair()
        gated = ClientConnection(daemon, socket_out, client_in, "gated", queue_bytes=1 << 20)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gated.run)
            with trio.fail_after(5):
                while gated not in daemon.fanout.clients:
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
    daemon = runtime.Daemon({"p": ProviderConfig(command=["p"])}, text_delta_flush_ms=0)
    daemon.add_client(Sink())
    bridge = BridgeProcess("p", daemon.providers["p"], daemon.supervisor, text_delta_flush_ms=0)

    def notes(thread: str) -> list[rpc.Notification]:
        deltas = stream.short_turn(
            thread
        )  # open, three text deltas, text close, usage, boundary: one notification each
        raw = [json.dumps({"threadId": thread, "deltas": [delta]}).encode() for delta in deltas]
        return [rpc.Notification("thread/delta", msgspec.Raw(line)) for line in raw]

    small = notes("thr_small")
    assert len(small) <= delivery.EARLY_SEND_MIN
    await daemon.output.on_notifications(bridge, small)
    assert len(steps) == 1 and len(steps[0]) == len(small)  # one send, no offer
    steps.clear()
    batch = [note for n in range(delivery.EARLY_SEND_MIN // len(small) + 1) for note in notes(f"thr_{n}")]
    assert len(batch) > delivery.EARLY_SEND_MIN
    await daemon.output.on_notifications(bridge, batch)
    assert steps[:2] == [["turn/started"], "yield"]  # the first notification's line, then the CPU offered once
    rest = [kind for step in steps[2:] for kind in step]  # every other line after that, no second offer
    assert len(rest) == len(batch) - 1 and rest[0] == "item/started" and rest[-1] == "turn/completed"


async def test_a_bridge_with_more_than_256_open_turns_assembles_every_thread() -> None:
    """The assembler keeps 256 thread states (the reference's bound); the daemon's never evicts a thread's state at
    birth, so the 300th open turn on one bridge streams like the first (it used to produce nothing)."""
    daemon = runtime.Daemon({"many": ProviderConfig(command=["many"])}, text_delta_flush_ms=0)
    bridge = BridgeProcess("many", daemon.providers["many"], daemon.supervisor)
    text = {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": "agentMessage", "text": "hi"}
    close = {"kind": "item.textClose", "key": {"providerItemId": "m"}, "channel": "agentMessage"}

    async def send(thread: str, *deltas: dict[str, Any]) -> None:
        raw = msgspec.json.encode({"threadId": thread, "deltas": list(deltas)})
        await daemon.output.on_notifications(bridge, [rpc.Notification("thread/delta", msgspec.Raw(raw))])

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
    daemon = runtime.Daemon({"p": ProviderConfig(command=["p"])}, text_delta_flush_ms=0)
    bridge = BridgeProcess("p", daemon.providers["p"], daemon.supervisor, text_delta_flush_ms=0)

    def check(event: Any) -> Any:
        if event["threadId"] == "thr_bad":
            raise RuntimeError("a broken check")
        return event

    made = daemon.output.open_delivery(bridge)
    bridge.delivery = Delivery(
        "p", bridge.assembler, bridge.guard, daemon.journal.log, daemon.registry.provider_threads, made.watched, check,
        made.checked,
    )  # fmt: skip
    batch = [
        rpc.Notification("thread/delta", None, grammar.decode_params(json.dumps(params).encode()))
        for thread in ("thr_good", "thr_bad", "thr_other")
        for params in ({"threadId": thread, "deltas": [delta]} for delta in stream.short_turn(thread))
    ]
    await daemon.output.on_notifications(bridge, batch)
    assert daemon.counters.failed_notifications == 2  # thr_bad's item/started and item/completed met the check
    for thread in ("thr_good", "thr_other"):
        entries = daemon.journal.log.thread(thread).entries()
        assert [msgspec.json.decode(e)["event"]["type"] for e in entries][-1] == "turn/completed"
    assert daemon.counters.deltas_in == len(batch)


async def test_held_text_goes_out_when_its_window_ends_with_no_more_traffic(autojump_clock: trio.MockClock) -> None:
    """Coalesced text waits for its window's end, then the flusher sends it with no delta after it, each bridge's
    in its turn (each queues its own flushes); a bridge that is not ready has its queued flushes dropped, and a
    daemon driven in process, with no flusher, queues none (its text waits for traffic)."""
    sent: list[tuple[float, str, str]] = []  # (when, thread, text) of each text event a client got

    class Sink:
        transport = "socket"

        def enqueue(self, lines: list[bytes]) -> None:
            for line in lines:
                params = json.loads(line)["params"]
                for entry in params["events"]:
                    if entry["event"]["type"] == "item/agentMessage/delta":
                        sent.append((round(trio.current_time(), 6), params["threadId"], entry["event"]["delta"]))

        async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
            raise AssertionError("nothing is relayed here")

    daemon = runtime.Daemon({p: ProviderConfig(command=[p]) for p in ("p", "q")}, text_delta_flush_ms=100)
    daemon.add_client(Sink())
    for provider in ("p", "q"):
        bridge = daemon.supervisor.bridges[provider] = BridgeProcess(
            provider, daemon.providers[provider], daemon.supervisor
        )
        bridge.state = "ready"
    p, q = daemon.supervisor.bridges["p"], daemon.supervisor.bridges["q"]

    async def send(bridge: BridgeProcess, thread: str, *deltas: dict[str, Any]) -> None:
        params = grammar.decode_params(msgspec.json.encode({"threadId": thread, "deltas": list(deltas)}))
        await daemon.output.on_notifications(bridge, [rpc.Notification("thread/delta", None, params)])

    def text(piece: str) -> dict[str, Any]:
        return {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": "agentMessage", "text": piece}

    async def at(when: float) -> None:
        await trio.sleep_until(when)
        await trio.testing.wait_all_tasks_blocked()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.output.flusher)
        await trio.testing.wait_all_tasks_blocked()
        await send(p, "thr_p", {"kind": "turn.open"}, text("a"))  # a stream's first text goes out at once
        await at(0.01)
        await send(p, "thr_p", text("b"), text("c"))  # held: its window began at 0.0
        await at(0.05)
        await send(q, "thr_q", {"kind": "turn.open"}, text("d"))
        await at(0.06)
        await send(q, "thr_q", text("e"))
        assert sent == [(0.0, "thr_p", "a"), (0.05, "thr_q", "d")]
        await at(0.114)
        assert len(sent) == 2  # queued at 0.01 for 0.11, taken with the flusher's slack
        await at(0.12)
        assert sent[2:] == [(0.115, "thr_p", "bc")]
        await at(0.2)
        assert sent[3:] == [(0.165, "thr_q", "e")]
        await send(p, "thr_p", text("f"))
        q.state = "stopping"
        await send(q, "thr_q", text("g"))
        await at(0.4)
        assert sent[4:] == [(0.305, "thr_p", "f")]
        assert not q.delivery.flushes and not q.delivery.queued  # dropped, not sent
        nursery.cancel_scope.cancel()

    q.state = "ready"
    await send(q, "thr_q", text("h"), text("i"))
    assert not q.delivery.flushes and not q.delivery.queued


async def test_the_flusher_takes_a_flush_due_at_the_clock_it_wakes_at(autojump_clock: trio.MockClock) -> None:
    """A flush due (in ms) at the very clock the flusher wakes at for another bridge's (in s) is taken, not spun
    on: 1001.0 ms is due at 1.001 s, whose ms read 1000.9999999999999."""
    sent: list[tuple[str, str]] = []

    class Sink:
        transport = "socket"

        def enqueue(self, lines: list[bytes]) -> None:
            for line in lines:
                params = json.loads(line)["params"]
                sent.extend(
                    (params["threadId"], e["event"]["delta"]) for e in params["events"] if "delta" in e["event"]
                )

        async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
            raise AssertionError("nothing is relayed here")

    daemon = runtime.Daemon({p: ProviderConfig(command=[p]) for p in ("p", "q")}, text_delta_flush_ms=100)
    daemon.add_client(Sink())
    for provider in ("p", "q"):
        daemon.supervisor.bridges[provider] = BridgeProcess(provider, daemon.providers[provider], daemon.supervisor)
        daemon.supervisor.bridges[provider].state = "ready"

    async def send(provider: str, at: float, *deltas: dict[str, Any]) -> None:
        await trio.sleep_until(at)
        params = grammar.decode_params(msgspec.json.encode({"threadId": f"thr_{provider}", "deltas": list(deltas)}))
        await daemon.output.on_notifications(
            daemon.supervisor.bridges[provider], [rpc.Notification("thread/delta", None, params)]
        )

    def text(piece: str) -> dict[str, Any]:
        return {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": "agentMessage", "text": piece}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.output.flusher)
        await send("q", 0.8, {"kind": "turn.open"}, text("a"))
        await send("p", 0.85, {"kind": "turn.open"}, text("b"))
        await send("q", 0.896, text("c"))  # due 996.0 ms: the flusher wakes at 1.001 s
        await send("p", 0.901, text("d"))  # due 1001.0 ms
        with trio.fail_after(1):
            while len(sent) < 4:
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert sorted(sent) == [("thr_p", "b"), ("thr_p", "d"), ("thr_q", "a"), ("thr_q", "c")]
