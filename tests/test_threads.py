"""The thread registry: what each way of letting a thread go clears, and what it keeps (issue 32, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from bbridge.core.grammar import ThreadDeltaParams, TurnOpen
from bbridge.daemon import runtime
from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.declared_tools import Tool
from bbridge.daemon.methods import FORWARDED, METHODS, RULES
from bbridge.daemon.threads import Cause, ThreadRecord
from bbridge.wire.jsonrpc import Notification
from tests.support import connect, fake_provider, running
from tests.test_declared_tools import LOOKUP, OK, run_call, start

THREAD = "thr_tools"


def test_every_forwarded_method_has_one_rule() -> None:
    assert set(METHODS) == FORWARDED
    assert set(RULES) <= FORWARDED  # a misspelt method would otherwise never be given its rule


def _in_process() -> tuple[runtime.Daemon, BridgeProcess]:
    daemon = runtime.Daemon({"p": ProviderConfig(command=["p"])}, text_delta_flush_ms=0)
    return daemon, BridgeProcess("p", daemon.providers["p"], daemon.supervisor, text_delta_flush_ms=0)


def _busy(daemon: runtime.Daemon, bridge: BridgeProcess, owner: Any) -> None:
    """A recorded thread with an open turn, a pending turn start, guard state, tools and bridge membership."""
    daemon.registry.construct("thr", "p", owner)
    bridge.serves("thr")
    daemon.registry.constructed("thr", {"t": Tool("t", "{}")}, "prov-thr")
    started = {"type": "turn/started", "threadId": "thr", "scope": {"kind": "turn", "turnId": "T1"}}
    daemon.tracker.observe("thr", started)
    bridge.guard.observe(started)
    bridge.watchdogs.observe("thr", started, 0)
    bridge.watchdogs.turn_dispatched("thr", 1)


async def test_a_release_lets_go_of_the_bridge_side_and_keeps_the_record() -> None:
    daemon, bridge = _in_process()
    owner = object()
    _busy(daemon, bridge, owner)
    assert daemon.supervisor.release("thr", bridge, Cause.RELEASED) == []
    assert "thr" not in bridge.threads and daemon.registry.records["thr"].watch is None
    assert "thr" not in bridge.watchdogs.watched and not bridge.guard._threads.get("thr")
    assert daemon.registry.tools_of("thr") == {}
    # kept: the provider routes a later request, the owner is asked first, the open work is still shown
    assert daemon.registry.provider_of("thr") == "p" and daemon.registry.owner_of("thr") is owner
    assert daemon.registry.provider_threads["thr"] == "prov-thr"
    assert daemon.tracker.open_turns("thr") == ["T1"]


async def test_a_bridge_exit_settles_open_work_and_keeps_the_tools() -> None:
    daemon, bridge = _in_process()
    _busy(daemon, bridge, None)
    settled = daemon.supervisor.release("thr", bridge, Cause.BRIDGE_EXITED, "gone")
    assert [e["type"] for e in settled] == ["provider/error", "turn/completed"]
    assert settled[0]["message"] == "gone" and settled[0]["providerThreadId"] == "prov-thr"
    assert daemon.tracker.open_turns("thr") == [] and daemon.registry.records["thr"].watch is None
    assert list(daemon.registry.tools_of("thr")) == ["t"]  # for the next bridge process of the provider


async def test_a_bridges_threads_are_its_providers_records_then_its_other_members() -> None:
    daemon, bridge = _in_process()
    daemon.registry.records["thr_a"] = ThreadRecord("thr_a", "p")
    daemon.registry.records["thr_q"] = ThreadRecord("thr_q", "q")
    bridge.threads.update({"thr_heard", "thr_a"})
    assert list(daemon.supervisor.threads_of(bridge)) == ["thr_a", "thr_heard"]


async def test_a_bridges_traffic_makes_members_noted_on_its_assembler_state(mock_clock: trio.testing.MockClock) -> None:
    """A thread the bridge sends deltas for (or a notification with none, once it has a state) joins its members
    after the read and its traffic time is its state's; a flush is not traffic; a released thread leaves and joins
    again at its next notification."""
    daemon, bridge = _in_process()
    bridge.delivery = daemon.output.open_delivery(bridge)

    async def read(thread_id: str, deltas: list[Any], at: float) -> None:
        mock_clock.jump(at - trio.current_time())
        await daemon.output.on_notifications(
            bridge, [Notification("thread/delta", None, ThreadDeltaParams(thread_id, deltas))]
        )

    await read("thr_a", [TurnOpen()], 1)
    assert bridge.threads == {"thr_a"} and bridge.assembler.heard_at("thr_a") == 1000
    await read("thr_a", [], 2)
    await read("thr_b", [], 3)  # no state: nothing to note, not a member
    assert bridge.assembler.heard_at("thr_a") == 2000 and bridge.threads == {"thr_a"}
    bridge.delivery.flush("thr_a", 4000)
    assert bridge.assembler.heard_at("thr_a") == 2000
    daemon.supervisor.release("thr_a", bridge, Cause.RELEASED)
    assert bridge.threads == set()
    await read("thr_a", [], 5)
    assert bridge.threads == {"thr_a"} and not bridge.assembler.arrivals


async def test_a_stop_with_intent_release_through_the_daemon(tmp_path: Path) -> None:
    """After the bridge answers a release, its thread is no member of the bridge and has no tools (a call is
    refused as undeclared); the daemon still routes the thread (no providerId needed) and shows its provider,
    provider thread and owner."""
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            assert await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 1) == OK
            status = await client.request("daemon/status", {})
            assert status["providers"][0]["threads"] == 1
            await client.request("thread/stop", {"threadId": THREAD, "intent": "release"})
            status = await client.request("daemon/status", {})
            assert status["providers"][0]["threads"] == 0
            [thread] = [t for t in status["threads"] if t["threadId"] == THREAD]
            assert thread["providerId"] == "fake" and thread["providerThreadId"] == f"prov-{THREAD}"
            assert thread["clients"]["owner"] is not None
            turn = {"threadId": THREAD, "input": [{"type": "text", "text": '{"tool": "lookup", "arguments": {}}'}]}
            await client.request("turn/start", turn | {"clientRequestId": "creq_abcdefghjn"})
            with trio.fail_after(10):
                await client.wait_for(lambda: client.types(THREAD).count("turn/completed") >= 2)
            assert daemon.counters.tool_calls_refused == 1


def _started(thread: str, turn: str) -> dict[str, Any]:
    return {"type": "turn/started", "threadId": thread, "scope": {"kind": "turn", "turnId": turn}}


async def test_a_threads_record_holds_its_watch_and_its_pending_requests() -> None:
    """The watchdog state and the open requests are the record's: the live read answers from it, a resolution
    leaves it, a release clears the watch and stops the bridge sweeping the thread."""
    daemon, bridge = _in_process()
    daemon.registry.construct("thr", "p", object())
    bridge.serves("thr")
    now = 0.0
    bridge.watchdogs.turn_dispatched("thr", now)
    record = daemon.registry.records["thr"]
    assert record.watch is not None and record.watch.start is not None and "thr" in bridge.watchdogs.watched
    assert daemon.registry.liveness("thr", now + 1).start_pending
    bridge.watchdogs.observe("thr", _started("thr", "T1"), now + 2)
    bridge.delivery.take_params(ThreadDeltaParams("thr", [TurnOpen()]), (now + 5) * 1000, [])  # its bridge's traffic
    question = daemon.interactions.add("interaction/request", "p", {"threadId": "thr", "payload": {"kind": "q"}})
    assert record.pending == {question.request_id: question}
    live = daemon.registry.liveness("thr", now + 8)
    assert (live.turn_id, live.turn_age_s, live.silence_s, live.start_pending) == ("T1", 6, 3, False)
    assert live.waiting == (question,) and live.waiting_count == 1
    daemon.interactions.resolve(question.request_id, "client")
    assert record.pending == {} and daemon.registry.liveness("thr", now + 8).waiting_count == 0
    daemon.supervisor.release("thr", bridge, Cause.RELEASED)
    assert record.watch is None and "thr" not in bridge.watchdogs.watched
    assert daemon.registry.liveness("thr", now + 9).turn_id is None


async def test_a_stall_warning_names_the_records_oldest_pending_request() -> None:
    daemon, bridge = _in_process()
    bridge.watchdogs.observe("thr", _started("thr", "T1"), 0)
    daemon.interactions.add("item/tool/call", "p", {"threadId": "thr", "tool": "t"})
    daemon.interactions.add("interaction/request", "p", {"threadId": "thr", "payload": {"kind": "approval"}})
    (warning,) = bridge.watchdogs.sweep(trio.current_time() + bridge.watchdogs.stall_timeout_s)
    assert warning["code"] == "turn_waiting_on_client" and warning["details"]["kind"] == "tool_call"


async def test_a_thread_no_client_constructed_gets_a_record_without_a_provider() -> None:
    """A turn started (or dispatched) on a thread the daemon never constructed is watched; its record routes
    nothing and lends no tools, and a bridge exit lets it go, record and all."""
    daemon, bridge = _in_process()
    bridge.watchdogs.observe("thr_heard", _started("thr_heard", "T1"), 0)
    bridge.watchdogs.turn_dispatched("thr_asked", 0)
    assert daemon.registry.provider_of("thr_heard") is None and not daemon.registry.on_provider("thr_heard", "p")
    codes = [e["code"] for e in bridge.watchdogs.sweep(bridge.watchdogs.stall_timeout_s)]
    assert codes == ["provider_turn_start_timeout", "provider_turn_stalled"]
    assert sorted(daemon.supervisor.threads_of(bridge)) == ["thr_asked", "thr_heard"]  # neither is a member
    for thread_id in list(daemon.supervisor.threads_of(bridge)):
        daemon.supervisor.release(thread_id, bridge, Cause.BRIDGE_EXITED, "gone")
    assert daemon.registry.records == {} and bridge.watchdogs.watched == {}


async def test_a_request_that_names_no_thread_is_in_no_record() -> None:
    daemon, _ = _in_process()
    pending = daemon.interactions.add("interaction/request", "p", {"payload": {"kind": "approval"}})
    assert daemon.registry.records == {} and daemon.interactions.of_provider("p") == [pending]
    daemon.interactions.resolve(pending.request_id, "client")
    assert daemon.interactions.open == {} and pending.done.is_set()


async def test_a_watch_lasts_while_a_turn_is_armed_and_a_providerless_record_while_it_holds_something() -> None:
    """An idle thread costs its bridge nothing: the watch goes when its last turn settles (a dispatch that
    failed, a completed turn), and a record no client constructed goes when its watch and requests have."""
    daemon, bridge = _in_process()
    daemon.registry.construct("thr", "p", object())
    bridge.serves("thr")
    bridge.watchdogs.turn_dispatched("thr", 0)
    bridge.watchdogs.dispatch_failed("thr")
    assert daemon.registry.records["thr"].watch is None and bridge.watchdogs.watched == {}
    bridge.watchdogs.observe("thr_heard", _started("thr_heard", "T1"), 0)
    asked = daemon.interactions.add("interaction/request", "p", {"threadId": "thr_heard", "payload": {"kind": "q"}})
    completed = {**_started("thr_heard", "T1"), "type": "turn/completed", "status": "completed"}
    bridge.watchdogs.observe("thr_heard", completed, 1)
    assert daemon.registry.records["thr_heard"].pending == {asked.request_id: asked}  # the request holds it
    assert bridge.watchdogs.watched == {}
    daemon.interactions.resolve(asked.request_id, "client")
    assert list(daemon.registry.records) == ["thr"]
