"""Idle reaping (issue 49, item 4; protocol.md §4.7): a thread idle past its provider's `idle_release_s` is released
and its next turn resumes it first; a thread with an open turn, a pending request or a session that cannot be
restored is kept; a bridge with no live thread past `bridge_idle_exit_s` is stopped and the next request starts
another; `prestart` spawns a bridge with the daemon; a released thread's MCP servers stop with it; no process is
left. The keys are refused, with reasons, like the provider table's others.

The bridge is tests/fakes/fake_bridge.py in its `restorable` mode (it keeps sessions, so a turn on a released thread
fails unless the daemon resumes it first), run in the test's folder so its processes can be counted; what it was
sent is read from its recorded runtime lane. Timeouts are tenths of a second.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.daemon.config import ProviderConfig, load_config
from bbridge.daemon.idle import RELEASED_IDLE
from bbridge.daemon.journal import Journal
from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.host import Host
from bbridge.wire import rpc
from tests.live.processes import leftovers
from tests.support import FAKE, connect, fake_provider, running
from tests.test_hosting_daemon import FakeHost, until

THREAD = "thr_idle"
SERVER = str(Path(__file__).with_name("mcp_server.py"))
TINY = {"name": "editor tools", "command": [sys.executable, SERVER]}


def provider(tmp_path: Path, modes: str = "restorable", **options: Any) -> ProviderConfig:
    """The fake bridge, run in `tmp_path` (its processes are found by their working directory)."""
    return fake_provider(modes, cwd=str(tmp_path), **options)


def start(thread: str = THREAD, cwd: str = "/tmp", **options: Any) -> dict[str, Any]:
    return {"providerId": "fake", "threadId": thread, "cwd": cwd, "options": {"model": "m1", **options}}


def turn(n: int, thread: str = THREAD, text: str = "hi") -> dict[str, Any]:
    """A turn that names no provider and no provider thread: the daemon finds both from the thread's record."""
    return {
        "threadId": thread,
        "input": [{"type": "text", "text": text}],
        "clientRequestId": f"creq_abcdefghj{'mnpqrstuvw'[n % 10]}",
    }


def sent(record: Path, thread: str = THREAD) -> list[tuple[str, dict[str, Any]]]:
    """The requests the bridge (every process of the provider) was sent for the thread, in order."""
    lane = record / "fake" / thread / "runtime→bridge.ndjson"
    messages = [json.loads(json.loads(line)["line"]) for line in lane.read_text().splitlines()]
    return [(m["method"], m.get("params") or {}) for m in messages if "method" in m and "id" in m]


def bridges(tmp_path: Path) -> dict[int, list[str]]:
    return leftovers([tmp_path], lambda argv: str(FAKE) in argv)


async def thread_row(client: Any, thread: str = THREAD) -> dict[str, Any]:
    status = await client.request("daemon/status", {})
    [row] = [row for row in status["threads"] if row["threadId"] == thread]
    return dict(row)


async def test_an_idle_thread_is_released_and_its_next_turn_resumes_it(tmp_path: Path) -> None:
    host = FakeHost()
    config = {"fake": provider(tmp_path, idle_release_s=0.3)}
    async with running(tmp_path, config, record_dir=tmp_path / "rec", tool_host=host) as (daemon, path):
        async with connect(path) as client:
            await client.request("thread/start", start())
            await client.request("turn/start", turn(1))
            await client.wait_for(lambda: client.settled(THREAD, 1))
            row = await thread_row(client)
            assert row["notReapable"] == [] and row["idleS"] is not None and row["idleS"] < 0.3

            await until(lambda: daemon.counters.idle_releases == 1)
            assert [m for m, _ in sent(tmp_path / "rec")] == ["thread/start", "turn/start", "thread/stop"]
            stop = sent(tmp_path / "rec")[-1][1]
            assert stop == {"threadId": THREAD, "providerThreadId": f"prov-{THREAD}", "intent": "release", "activeTurnId": None}  # fmt: skip
            assert host.forgotten == [THREAD]  # the tool host let its tools and servers go
            row = await thread_row(client)
            assert row["notReapable"] == [RELEASED_IDLE] and row["idleS"] >= 0.3
            status = await client.request("daemon/status", {})
            assert status["providers"][0]["threads"] == 0

            await client.request("turn/start", turn(2))  # the bridge refuses a turn on a session it released
            await client.wait_for(lambda: client.settled(THREAD, 2))
            methods = [m for m, _ in sent(tmp_path / "rec")]
            assert methods[3:5] == ["thread/resume", "turn/start"]
            resume = sent(tmp_path / "rec")[3][1]
            assert resume["providerThreadId"] == f"prov-{THREAD}" and resume["cwd"] == "/tmp"
            assert resume["options"] == {"model": "m1"} and "providerId" not in resume
            assert client.text(THREAD) == "hellohello" and daemon.counters.idle_resumes == 1
            # released again once idle: each release and resume is the same again
            await until(lambda: daemon.counters.idle_releases == 2)
    assert bridges(tmp_path) == {}


def open_files(directory: Path) -> set[str]:
    """The files under `directory` this process has open."""
    found = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = fd.readlink()
            if target.is_relative_to(directory):
                found.add(target.name)
    return found


@pytest.mark.parametrize("journaled", [True, False])
async def test_a_released_thread_holds_its_inputs_and_events_only_in_its_journal(
    tmp_path: Path, journaled: bool
) -> None:
    """With a journal, an idle release lets the thread's turn inputs and events go from memory and closes its
    journal file (the files have them all: read when asked for, appended to at its next turn); without one they
    stay, since nothing else holds them."""
    config = {"fake": provider(tmp_path, idle_release_s=0.3)}
    journal = Journal(directory=tmp_path / "journal") if journaled else Journal()
    async with running(tmp_path, config, journal=journal) as (daemon, path), connect(path) as client:
        await client.request("thread/start", start())
        await client.request("turn/start", turn(1, text="first"))
        await client.wait_for(lambda: client.settled(THREAD, 1))
        assert THREAD in daemon.inputs.held and THREAD in journal.log.threads
        first = await client.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
        await until(lambda: daemon.counters.idle_releases == 1)
        assert (THREAD in daemon.inputs.held) is not journaled and (THREAD in journal.log.threads) is not journaled
        if sys.platform == "linux" and journaled:
            assert open_files(tmp_path / "journal") == set()
        listed = await client.request("thread/inputs", {"threadId": THREAD})
        assert [i["input"][0]["text"] for i in listed["inputs"]] == ["first"]
        replayed = await client.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
        assert replayed["events"] == first["events"] and replayed["lastSeq"] == first["lastSeq"] > 2
        later = await client.request("thread/events", {"threadId": THREAD, "afterSeq": first["lastSeq"] - 2})
        assert later["events"] == first["events"][-2:] and "missingThrough" not in later
        await client.request("turn/start", turn(2, text="second"))  # resumed: its files appended to
        await client.wait_for(lambda: client.settled(THREAD, 2))
        listed = await client.request("thread/inputs", {"threadId": THREAD})
        assert [i["input"][0]["text"] for i in listed["inputs"]] == ["first", "second"]
        both = await client.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
        assert both["events"][: len(first["events"])] == first["events"]
        assert [e["seq"] for e in both["events"]] == list(range(1, both["lastSeq"] + 1))  # seqs go on, no gap


async def test_two_turns_at_once_on_a_released_thread_resume_it_once(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": provider(tmp_path, idle_release_s=0.2)}, record_dir=tmp_path / "rec") as (
        daemon,
        path,
    ):
        async with connect(path) as client:
            await client.request("thread/start", start())
            await until(lambda: daemon.counters.idle_releases == 1)
            async with trio.open_nursery() as nursery:
                for n in (1, 2):
                    nursery.start_soon(client.request, "turn/start", turn(n))
            await client.wait_for(lambda: client.settled(THREAD, 2))
            assert [m for m, _ in sent(tmp_path / "rec")][:5] == [
                "thread/start",
                "thread/stop",
                "thread/resume",
                "turn/start",
                "turn/start",
            ]


@pytest.mark.parametrize(
    ("modes", "reason"),
    [
        ("restorable,silent-turn", "a turn open"),
        ("restorable,ask", "waiting on a client"),
        ("unrestorable", "its session cannot be restored"),
        ("plain", "its session cannot be restored"),  # no sessionRestorable, no sessionRestore capability
    ],
)
async def test_a_thread_with_an_open_turn_a_pending_request_or_no_restorable_session_is_kept(
    tmp_path: Path, modes: str, reason: str
) -> None:
    async with running(tmp_path, {"fake": provider(tmp_path, modes, idle_release_s=0.1)}) as (daemon, path):
        async with connect(path, answer=lambda request: trio.sleep_forever()) as client:
            await client.request("thread/start", start())
            if "," in modes:
                await client.request("turn/start", turn(1))
                await until(lambda: reason in daemon.status()["threads"][0]["notReapable"])
            await trio.sleep(0.6)  # six idle periods and more sweeps
            assert daemon.counters.idle_releases == 0
            row = await thread_row(client)
            assert reason in row["notReapable"], row
            if "," in modes:
                assert row["idleS"] is None  # a turn is open: the session is not idle
    assert bridges(tmp_path) == {}


async def test_an_idle_bridge_is_stopped_and_the_next_request_starts_another(tmp_path: Path) -> None:
    config = {"fake": provider(tmp_path, idle_release_s=0.2, bridge_idle_exit_s=0.3)}
    async with running(tmp_path, config, record_dir=tmp_path / "rec") as (daemon, path):
        async with connect(path) as client:
            await client.request("thread/start", start())
            await client.request("turn/start", turn(1))
            await client.wait_for(lambda: client.settled(THREAD, 1))
            first = daemon.supervisor.bridges["fake"].pid
            assert list(bridges(tmp_path)) == [first]
            proc = daemon.supervisor.bridges["fake"]._proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            pipes = [proc.stdin, proc.stdout, proc.stderr]
            status = await client.request("daemon/status", {})
            assert status["providers"][0]["idleS"] is None  # it serves the thread

            await until(lambda: "fake" not in daemon.supervisor.bridges)
            assert daemon.counters.idle_bridge_stops == 1 and bridges(tmp_path) == {}
            await until(lambda: all(pipe.fileno() == -1 for pipe in pipes))  # closed, not left to the collector
            status = await client.request("daemon/status", {})
            assert status["providers"][0]["state"] == "idle"

            await client.request("turn/start", turn(2))  # a new bridge, the thread resumed on it
            await client.wait_for(lambda: client.settled(THREAD, 2))
            second = daemon.supervisor.bridges["fake"].pid
            assert second != first and list(bridges(tmp_path)) == [second]
            assert [m for m, _ in sent(tmp_path / "rec")][-2:] == ["thread/resume", "turn/start"]
    assert bridges(tmp_path) == {}


async def test_a_bridge_that_never_served_a_thread_is_stopped_too(tmp_path: Path) -> None:
    config = {"fake": provider(tmp_path, prestart=True, bridge_idle_exit_s=0.2)}
    async with running(tmp_path, config) as (daemon, _path):
        await until(lambda: daemon.counters.idle_bridge_stops == 1)
        assert bridges(tmp_path) == {}


async def test_prestart_spawns_and_handshakes_the_bridge_at_start(tmp_path: Path) -> None:
    config = {"fake": provider(tmp_path, prestart=True), "lazy": provider(tmp_path / "lazy")}
    (tmp_path / "lazy").mkdir()
    async with running(tmp_path, config) as (daemon, path):
        await until(lambda: "fake" in daemon.supervisor.bridges and daemon.supervisor.bridges["fake"].state == "ready")
        assert "lazy" not in daemon.supervisor.bridges
        assert list(bridges(tmp_path)) == [daemon.supervisor.bridges["fake"].pid]
        assert daemon.status()["providers"][0]["idleS"] >= 0  # it serves no thread
        async with connect(path) as client:  # the first thread uses it
            await client.request("thread/start", start())
            assert list(bridges(tmp_path)) == [daemon.supervisor.bridges["fake"].pid]
    assert bridges(tmp_path) == {}


async def test_a_prestart_that_fails_is_shown_and_the_next_request_tries_again(tmp_path: Path) -> None:
    config = {"fake": provider(tmp_path, "crash-at-start", prestart=True)}
    async with running(tmp_path, config) as (daemon, path):
        await until(lambda: "fake" in daemon.supervisor.start_failures)
        async with connect(path) as client:
            with pytest.raises(rpc.RpcError) as failed:
                await client.request("thread/start", start())
            assert "crash-at-start" in failed.value.message or "exited during startup" in failed.value.message
    assert bridges(tmp_path) == {}


async def test_a_released_threads_mcp_servers_stop_with_it_and_start_again_at_its_resume(tmp_path: Path) -> None:
    host = Host(Catalog([], [], [], []), client_servers=True)
    (tmp_path / "w").mkdir()

    def servers() -> dict[int, list[str]]:
        return leftovers([tmp_path / "w"], lambda argv: SERVER in argv)

    async with host.serving():
        config = {"fake": provider(tmp_path, idle_release_s=0.3)}
        async with running(tmp_path, config, tool_host=host) as (daemon, path), connect(path) as client:
            await client.request("thread/start", start(cwd=str(tmp_path / "w"), tools={"mcpServers": [TINY]}))
            assert len(servers()) == 1
            await until(lambda: daemon.counters.idle_releases == 1)
            await until(lambda: not servers())
            await client.request("turn/start", turn(1))
            await client.wait_for(lambda: client.settled(THREAD, 1))
            assert len(servers()) == 1  # the resume brought them again
    assert servers() == {} and bridges(tmp_path) == {}


async def test_a_failed_resume_fails_the_turn_saying_so_and_the_next_tries_again(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": provider(tmp_path, idle_release_s=0.2)}) as (daemon, path):
        async with connect(path) as client:
            await client.request("thread/start", start())
            await until(lambda: daemon.counters.idle_releases == 1)
            daemon.registry.provider_threads[THREAD] = "prov-other"  # a session the bridge cannot restore
            with pytest.raises(rpc.RpcError) as failed:
                await client.request("turn/start", turn(1))
            assert failed.value.code == rpc.SESSION_NOT_RESTORABLE
            assert failed.value.message == (
                f"Thread {THREAD!r} was released after being idle, and resuming it for turn/start failed: "
                "session prov-other cannot be restored"
            )
            record = daemon.registry.records[THREAD]
            assert record.parked and not client.types(THREAD).count("turn/started")
            daemon.registry.provider_threads[THREAD] = f"prov-{THREAD}"
            await client.request("turn/start", turn(2))
            await client.wait_for(lambda: client.settled(THREAD, 1))


@pytest.mark.parametrize(
    ("table", "key", "error"),
    [
        ("idle_release_s = -1", "idle_release_s", "expected 0 (off) or a positive, finite number of seconds, got -1.0"),
        ("bridge_idle_exit_s = nan", "bridge_idle_exit_s", "expected 0 (off) or a positive, finite number of seconds"),
        ('prestart = "yes"', "prestart", "expected a boolean, got a string"),
    ],
)
def test_the_keys_are_refused_with_reasons(tmp_path: Path, table: str, key: str, error: str) -> None:
    path = tmp_path / "bbridge.toml"
    path.write_text(f'[providers.p]\ncommand = ["p"]\n{table}\n', encoding="utf-8")
    loaded = load_config(path)
    assert "p" not in loaded.providers
    [refusal] = loaded.report.refused
    assert (refusal.section, refusal.key) == ("providers.p", key) and refusal.error.startswith(error), refusal


def test_the_defaults_release_after_half_an_hour_and_keep_bridges(tmp_path: Path) -> None:
    path = tmp_path / "bbridge.toml"
    path.write_text('[providers.p]\ncommand = ["p"]\n[providers.q]\ncommand = ["q"]\nidle_release_s = 0\n'
                    "bridge_idle_exit_s = 600\nprestart = true\n", encoding="utf-8")  # fmt: skip
    providers = load_config(path).providers
    assert (providers["p"].idle_release_s, providers["p"].bridge_idle_exit_s, providers["p"].prestart) == (
        1800,
        0,
        False,
    )
    assert (providers["q"].idle_release_s, providers["q"].bridge_idle_exit_s, providers["q"].prestart) == (0, 600, True)
