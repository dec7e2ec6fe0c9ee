"""What an operator meets around a running daemon (issue 31): journaled threads after a restart, a provider that
failed to start or was refused, a stop that loses its race with an approval, advice about `BB_*` variables."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bbridge.client import Client
from bbridge.daemon import runtime
from bbridge.daemon.bridge import BridgeProcess, ExitStatus
from bbridge.daemon.config import ProviderConfig, load_config
from bbridge.daemon.journal import Journal
from bbridge.daemon.threads import ThreadRecord
from bbridge.ops import Tail, format_status
from bbridge.run import write_config
from bbridge.wire import errors, rpc
from tests.support import FAKE, TestClient, connect, creq, fake_provider, running

START = {"providerId": "fake", "cwd": "/tmp", "options": {}}


async def hang(request: rpc.Request) -> Any:
    """A client asked, who never answers (a person away from the screen)."""
    await trio.sleep_forever()


async def one_turn(client: TestClient, thread_id: str, n: int = 1) -> None:
    await client.request("thread/start", {**START, "threadId": thread_id})
    turn = {"providerId": "fake", "threadId": thread_id, "input": [], "clientRequestId": creq(n)}
    await client.request("turn/start", turn)
    await client.wait_for(lambda: client.settled(thread_id))


# -- item 6: every journaled thread is listed and replayed after a restart ----------------------------------------


async def test_every_journaled_thread_is_listed_and_replayed_after_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    threads = [f"thr_j{n}" for n in range(5)] + ["é" * 43 + "-hashed"]  # a hashed file name among them
    async with running(tmp_path, {"fake": fake_provider("ask")}, journal=Journal(directory=folder)) as (_, path):
        async with connect(path, answer=lambda request: {"ok": True}) as client:
            for n, thread_id in enumerate(threads):
                await one_turn(client, thread_id, n)
            before = {thread_id: client.entries[thread_id] for thread_id in threads}
    assert any(name.endswith(".interactions.ndjson") for name in map(str, folder.iterdir()))  # not a thread's
    async with running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (_, path):
        async with connect(path) as client:
            status = await client.request("daemon/status")
        listed = {thread["threadId"]: thread["lastSeq"] for thread in status["threads"]}
        assert listed == {thread_id: entries[-1]["seq"] for thread_id, entries in before.items()}
        out = io.StringIO()
        tail = Tail(out, as_json=True, thread_id=None)  # `bbridge tail --after-seq 0 --json`
        async with Client.connect(path) as ops_client, trio.open_nursery() as nursery:
            nursery.start_soon(tail.follow, ops_client, 0)
            with trio.fail_after(10):
                while out.getvalue().count("\n") < sum(map(len, before.values())):
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    replayed: dict[str, list[object]] = {}
    for line in out.getvalue().splitlines():
        record = json.loads(line)
        replayed.setdefault(record["threadId"], []).append({"seq": record["seq"], "event": record["event"]})
    assert replayed == before


# -- item 12: a stop that loses its race with a declined approval ---------------------------------------------------


async def test_a_stop_whose_interrupt_the_bridge_refuses_after_the_decline_ended_the_turn_succeeds(
    tmp_path: Path,
) -> None:
    """The stop declines the pending approval; the bridge ends the turn on the decline, then refuses the interrupt
    (`no active turn`): the thread is stopped, so the stop succeeds and says the turn had already ended."""
    thread = "thr_race"
    async with (
        running(tmp_path, {"fake": fake_provider("approval,strict-stop")}) as (_, path),
        connect(path, answer=hang) as client,
    ):
        await client.request("thread/start", {**START, "threadId": thread})
        turn = {"providerId": "fake", "threadId": thread, "input": [], "clientRequestId": creq(1)}
        await client.request("turn/start", turn)
        await client.wait_for(lambda: any(method == "interaction/opened" for method, _ in client.notes))
        turn_id = client.of(thread, "turn/started")[0]["scope"]["turnId"]
        stop = {"providerId": "fake", "threadId": thread, "intent": "interrupt", "activeTurnId": turn_id}
        assert await client.request("thread/stop", stop) == {"turnAlreadyEnded": True}
        assert [e["status"] for e in client.of(thread, "turn/completed")] == ["interrupted"]
        (resolved,) = [params for method, params in client.notes if method == "interaction/resolved"]
        assert resolved["resolvedBy"] == "daemon:thread-stop" and resolved["result"] == {"decision": "deny"}
        with pytest.raises(rpc.RpcError) as refused:  # a stop with no turn open at all gets the bridge's answer
            await client.request("thread/stop", stop)
        assert refused.value.code == -32001 and "no active turn" in refused.value.message


# -- item 5: a provider that failed to start, a provider the configuration refused ----------------------------------


async def test_status_shows_a_failed_start_and_a_refused_provider_says_why(tmp_path: Path) -> None:
    fake = fake_provider("crash-at-start")
    toml = tmp_path / "bbridge.toml"
    command = ", ".join(json.dumps(arg) for arg in fake.command)
    toml.write_text(f"[providers.fake]\ncommand = [{command}]\n\n[providers.broken]\ncwd = 3\n")
    providers, report = load_config(toml)
    async with running(tmp_path, providers, config=report) as (_, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as failed:
            await client.request("thread/start", {**START, "threadId": "thr_f"})
        assert failed.value.code == errors.BRIDGE_START_FAILED
        status = await client.request("daemon/status")
        (entry,) = [p for p in status["providers"] if p["providerId"] == "fake"]
        assert entry == {"providerId": "fake", "state": "failed", "reason": failed.value.message}
        assert f"  fake  failed: {failed.value.message}" in format_status(status)
        init = await client.request("initialize", {"client": {"name": "t", "version": "1"}, "protocolVersion": 1})
        assert {"providerId": "fake", "state": "failed", "reason": failed.value.message} in init["providers"]
        with pytest.raises(rpc.RpcError) as refused:
            await client.request("thread/start", {**START, "providerId": "broken", "threadId": "thr_b"})
        assert refused.value.code == errors.UNKNOWN_PROVIDER
        assert refused.value.message == (
            f"Provider 'broken' was refused by the configuration ({toml}): providers.broken.command: missing (required)"
            "; providers.broken.cwd: expected a string, got an integer. Fix the entry and restart the daemon "
            "(`bbridge config check` lists every refused entry)"
        )


# -- item 2: advice about BB_* variables that works through bbridge ------------------------------------------------


class LogSpy:
    """Stands in for a module's structlog logger: every call recorded as (method, args, key-values)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def bind(self, **_: Any) -> LogSpy:
        return self

    def __getattr__(self, method: str) -> Any:
        return lambda *args, **values: self.records.append((method, args, values))


ADVICE = (
    "bbridge passes no BB_* variable of its own environment to a bridge{removed}: set {name} in the provider's env "
    'in bbridge.toml ([providers.{provider}] env = {{ {name} = "..." }}) and restart the daemon, or pass '
    "`bbridge run --env {name}=...`"
)


async def test_advice_to_set_a_bb_variable_says_how_through_bbridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = LogSpy()
    monkeypatch.setattr("bbridge.daemon.bridge.log", spy)
    monkeypatch.setenv("BB_FAKE_EXECUTABLE", "/secret/value")
    monkeypatch.setenv("BB_ZZ_UNRELATED", "other-secret")
    providers = {
        "fake": fake_provider("needs-env"),
        "given": fake_provider("needs-env", env={"BB_FAKE_EXECUTABLE": "/x"}),
    }
    async with running(tmp_path, providers) as (_, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as refused:  # a bridge's error answer, forwarded
            await client.request("thread/start", {**START, "threadId": "thr_e"})
        removed = ADVICE.format(
            removed=" (BB_FAKE_EXECUTABLE was set and removed)", name="BB_FAKE_EXECUTABLE", provider="fake"
        )
        assert refused.value.message == (
            f"fake could not find its CLI: set BB_FAKE_EXECUTABLE to its full path, then restart bb. [{removed}]"
        )
        stripped = [values for method, _, values in spy.records if method == "warning" and "variables" in values]
        assert stripped == [{"variables": ["BB_FAKE_EXECUTABLE", "BB_ZZ_UNRELATED"]}]  # names, once per start
        assert "secret" not in repr(spy.records)
        await client.request("thread/start", {**START, "providerId": "given", "threadId": "thr_g"})
        turn = {"providerId": "given", "threadId": "thr_g", "input": [], "clientRequestId": creq(1)}
        await client.request("turn/start", turn)
        await client.wait_for(lambda: client.settled("thr_g"))
        types = client.types("thr_g")
        error = client.of("thr_g", "provider/error")[0]
        assert error["message"] == "fake CLI: not logged in"  # the canonical event as the bridge made it
        assert error["detail"] == "set BB_FAKE_TOKEN to a token, then restart bb."
        (warning,) = client.of("thr_g", "system/warning")
        assert types.index("system/warning") > types.index("provider/error")  # after the events of its read
        assert warning["code"] == "bridge_env_not_passed"
        assert warning["message"] == ADVICE.format(removed="", name="BB_FAKE_TOKEN", provider="given")
        assert warning["details"] == {"variables": ["BB_FAKE_TOKEN"], "stripped": []}


async def test_a_start_failure_naming_a_stripped_variable_says_how_to_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BB_FAKE_EXECUTABLE", "/secret/value")
    script = tmp_path / "needs.py"
    script.write_text("import sys\nsys.exit('set BB_FAKE_EXECUTABLE to the CLI, then restart bb')\n")
    async with (
        running(tmp_path, {"fake": ProviderConfig(command=[sys.executable, str(script)])}) as (daemon, path),
        connect(path) as client,
    ):
        with pytest.raises(rpc.RpcError) as failed:
            await client.request("thread/start", {**START, "threadId": "thr_s"})
        assert failed.value.code == errors.BRIDGE_START_FAILED
        removed = ADVICE.format(
            removed=" (BB_FAKE_EXECUTABLE was set and removed)", name="BB_FAKE_EXECUTABLE", provider="fake"
        )
        assert failed.value.message.endswith(f'"set BB_FAKE_EXECUTABLE to the CLI, then restart bb" [{removed}]')
        assert daemon.status()["providers"][0]["reason"] == failed.value.message


def test_bbridge_run_env_reaches_the_bridge(tmp_path: Path) -> None:
    """`bbridge run --env NAME=VALUE`: written into the temporary config's provider `env`, so a BB_* variable
    reaches the bridge (`needs-env` completes its turn only with both of its variables)."""
    env = {"BB_FAKE_EXECUTABLE": "/opt/fake", "BB_FAKE_TOKEN": 'a "quoted" = value'}
    assert load_config(write_config(tmp_path, ["bridge"], None, env)).providers["bridge"].env == env
    command = f"{sys.executable} {FAKE} needs-env"
    base = [sys.executable, "-m", "bbridge", "run", "--provider-cmd", command, "--prompt", "hi"]
    flags = [arg for name, value in env.items() for arg in ("--env", f"{name}={value}")]
    done = subprocess.run([*base, *flags], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    without = subprocess.run(base, capture_output=True, text=True, timeout=60, check=False)
    assert without.returncode == 1 and "bbridge run --env BB_FAKE_EXECUTABLE=..." in without.stderr
    bad = subprocess.run([*base, "--env", "NO_EQUALS"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--env 'NO_EQUALS': expected NAME=VALUE" in bad.stderr


async def test_a_bridge_that_dies_naming_a_bb_variable_gets_the_advice_after_its_settlement() -> None:
    """The daemon's own `provider/error` for a dead bridge quotes its stderr; a `BB_*` variable named there gets
    the same `system/warning` (an in-process daemon: the bridge's exit handled directly)."""
    daemon = runtime.Daemon({"p": ProviderConfig(command=["p"])}, text_delta_flush_ms=0)
    bridge = BridgeProcess("p", daemon.providers["p"], daemon.supervisor, text_delta_flush_ms=0)
    daemon.registry.records["thr_d"] = ThreadRecord("thr_d", "p")
    daemon.tracker.observe(
        "thr_d", {"type": "turn/started", "threadId": "thr_d", "scope": {"kind": "turn", "turnId": "t1"}}
    )
    bridge._stderr.feed(b"fatal: set BB_P_HOME to the agent's home, then restart bb\n")
    await daemon.supervisor.on_exit(bridge, ExitStatus(3, None))
    events = [msgspec.json.decode(entry)["event"] for entry in daemon.journal.log.thread("thr_d").entries()]
    assert [e["type"] for e in events] == ["provider/error", "turn/completed", "system/warning"]
    assert "set BB_P_HOME" in events[0]["message"] and "[bbridge" not in events[0]["message"]
    assert events[2]["code"] == "bridge_env_not_passed" and events[2]["details"]["variables"] == ["BB_P_HOME"]


async def test_a_bridge_that_ignores_sigterm_is_killed_after_its_providers_stop_grace() -> None:
    """`stop_grace_s` (bbridge.toml) is the time from the SIGTERM to the SIGKILL of the bridge's group."""
    daemon = runtime.Daemon({"p": fake_provider("ignore-term", stop_grace_s=0.5)}, text_delta_flush_ms=0)
    async with trio.open_nursery() as nursery:
        bridge = BridgeProcess("p", daemon.providers["p"], daemon.supervisor, text_delta_flush_ms=0)
        await bridge.start(nursery)
        started = trio.current_time()
        await bridge.terminate()
        assert 0.5 <= trio.current_time() - started < 3  # the default grace is 5 s
        assert bridge.exit == ExitStatus(None, signal.SIGKILL)
