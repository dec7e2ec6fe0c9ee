"""Budgets across providers (issue 49): `[[budgets]]` read and refused with reasons; checked before `turn/start` and
`turn/steer` and before a Perspectives run launches and between its phases: `deny` (the error's message and data),
`ask` (answered by a second client, allowing and denying, and by the timeout), `warn` (one `system/warning`); and
`daemon/status` showing each budget's spent and limit. The fake bridge's `usage` mode spends tokens every turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.cli import main
from bbridge.daemon import server
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.journal import Journal
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.usage_config import UsageConfig, usage_from
from bbridge.perspectives.room import Perspectives
from bbridge.perspectives.settings import load_perspectives
from bbridge.serving import room_face
from bbridge.toolhost.host import load_host
from bbridge.wire import errors, rpc
from tests.support import TestClient, connect, creq, fake_provider, running
from tests.test_ops import bbridge
from tests.test_perspectives_runs import CALLER, FULL, call, delivered, table, text_of

THREAD = "thr_budget"


def budgets(action: str, tokens: int = 100, **entry: Any) -> UsageConfig:
    config = usage_from({"budgets": [{"name": "tight", "window": "1d", "tokens": tokens, "action": action, **entry}]})
    assert not config.refused, config.refused
    return config


async def never(request: rpc.Request) -> Any:
    """An owner that leaves relayed approvals to other clients."""
    await trio.sleep_forever()


async def spend(client: TestClient, n: int, thread: str = THREAD) -> None:
    """The thread's n-th turn, run to its end (it spends over a thousand tokens)."""
    await client.request("turn/start", {"threadId": thread, "input": [], "clientRequestId": creq(n)})
    await client.wait_for(lambda: len(client.of(thread, "turn/completed")) >= n)


@asynccontextmanager
async def spent(
    tmp_path: Path, config: UsageConfig, provider: ProviderConfig | None = None
) -> AsyncIterator[tuple[Daemon, Path, TestClient]]:
    """A daemon with `config`'s budgets, its thread's owner connected (it never answers a relayed request) and one
    turn spent."""
    providers = {"fake": provider or fake_provider("usage")}
    async with running(tmp_path, providers, spending=config) as (daemon, path), connect(path, never) as owner:
        start = {"providerId": "fake", "threadId": THREAD, "cwd": "/tmp", "options": {"model": "m"}}
        await owner.request("thread/start", start)
        await spend(owner, 1)
        yield daemon, path, owner


async def refusal(client: TestClient, method: str, params: dict[str, Any]) -> rpc.RpcError:
    with pytest.raises(rpc.RpcError) as refused:
        await client.request(method, params)
    return refused.value


async def opened(client: TestClient) -> dict[str, Any]:
    """The approval a budget opened, as a client is told of it."""
    await client.wait_for(lambda: any(method == "interaction/opened" for method, _ in client.notes))
    return next(params for method, params in client.notes if method == "interaction/opened")


# -- the file -----------------------------------------------------------------------------------------------------


def test_prices_and_budgets_are_read_and_a_broken_entry_refused_with_its_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text(
        '[pricing."gpt-5"]\ninput_per_mtok = 1.25\noutput_per_mtok = 10\n'
        '[pricing."claude-*"]\ninput_per_mtok = -3\noutput_per_mtok = 15\nper_call = 1\n'
        '[[budgets]]\nname = "daily"\nwindow = "1d"\ntokens = 1000\naction = "ask"\n'
        '[[budgets]]\nname = "daily"\nscope = "tenant"\nwindow = "2d"\nusd = 5\naction = "stop"\n'
        '[[budgets]]\nname = "opus"\nscope = "model"\nmatch = "opus"\nwindow = "run"\nusd = 5\naction = "warn"\n'
        '[[budgets]]\nname = "none"\nwindow = "thread"\naction = "deny"\n',
        encoding="utf-8",
    )
    assert main(["config", "check", "--config", str(config)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "8 refused; 1 providers would serve (echo); 1 priced model (gpt-5); 1 budget (daily)"
    assert (
        lines[:-1]
        == [
            'refused pricing."claude-*".per_call: unknown key (known: input_per_mtok, cached_input_per_mtok, '
            "output_per_mtok)",
            'refused pricing."claude-*".input_per_mtok: expected a finite number of USD, at least 0, got -3',
            'refused budgets[1] (name "daily").scope: expected one of all, provider, model, thread, client, run, got '
            '"tenant"',
            'refused budgets[1] (name "daily").window: expected one of 1h, 1d, 7d, 30d, thread, run, got "2d"',
            'refused budgets[1] (name "daily").action: expected one of deny, ask, warn, got "stop"',
            'refused budgets[1] (name "daily").name: repeated (first at budgets[0])',
            'refused budgets[2] (name "opus").usd: needs a price for model \'opus\': add [pricing."opus"]',
            'refused budgets[3] (name "none"): needs a limit: tokens and/or usd',
        ][: len(lines) - 1]
        or lines[:-1]
    )


# -- a turn -------------------------------------------------------------------------------------------------------


async def test_deny_refuses_a_turn_start_and_a_steer_naming_the_budget_spent_and_limit(tmp_path: Path) -> None:
    async with spent(tmp_path, budgets("deny")) as (daemon, path, owner):
        used = owner.of(THREAD, "thread/tokenUsage/updated")[-1]["tokenUsage"]["total"]["totalTokens"]
        refused = await refusal(owner, "turn/start", {"threadId": THREAD, "input": [], "clientRequestId": creq(2)})
        steer = {"threadId": THREAD, "input": [], "clientRequestId": creq(3), "expectedTurnId": "t"}
        steered = await refusal(owner, "turn/steer", steer)
        status = await owner.request("daemon/status", {})
    assert refused.code == errors.BUDGET_EXCEEDED == steered.code
    assert refused.message == (f'Budget "tight" is spent: {used} of 100 tokens in the last day; turn/start refused')
    assert refused.data == {"budget": "tight", "spent": {"tokens": used}, "limit": {"tokens": 100}, "window": "1d"}
    assert "turn/steer refused" in steered.message
    assert len(owner.of(THREAD, "turn/started")) == 1  # nothing reached the bridge
    assert status["budgets"] == [
        {"name": "tight", "scope": "all", "match": "*", "window": "1d", "action": "deny",
         "spent": {"tokens": used}, "limit": {"tokens": 100}, "key": None},
    ]  # fmt: skip


async def test_a_budget_kept_per_key_covers_only_its_keys(tmp_path: Path) -> None:
    """Per model: the thread's model `m` is past its limit, another model on the same thread is not."""
    async with spent(tmp_path, budgets("deny", scope="model", match="m*")) as (daemon, path, owner):
        other = {"threadId": THREAD, "input": [], "clientRequestId": creq(2), "options": {"model": "x"}}
        await owner.request("turn/start", other)
        await owner.wait_for(lambda: len(owner.of(THREAD, "turn/completed")) == 2)
        refused = await refusal(owner, "turn/start", {**other, "clientRequestId": creq(3), "options": {"model": "m"}})
        (state,) = (await owner.request("daemon/status", {}))["budgets"]
    assert 'Budget "tight" is spent for model m:' in refused.message
    assert state["key"] == "m" and state["spent"]["tokens"] > 100


async def test_warn_lets_the_turn_through_with_one_system_warning(tmp_path: Path) -> None:
    async with spent(tmp_path, budgets("warn")) as (daemon, path, owner):
        await spend(owner, 2)
        warnings = [e for e in owner.of(THREAD, "system/warning") if e.get("code") == "budget_exceeded"]
    (warning,) = warnings
    assert warning["message"].startswith('Budget "tight" is spent: ') and "turn/start let through" in warning["message"]
    assert warning["details"]["budget"] == "tight" and warning["details"]["limit"] == {"tokens": 100}


async def test_ask_answered_by_a_second_client_allows_the_turn(tmp_path: Path) -> None:
    async with spent(tmp_path, budgets("ask")) as (daemon, path, owner), trio.open_nursery() as nursery:
        nursery.start_soon(spend, owner, 2)
        asked = await opened(owner)
        answered = await bbridge("respond", "--socket", str(path), asked["requestId"], "allow_once")
        await owner.wait_for(lambda: len(owner.of(THREAD, "turn/completed")) == 2)
    assert answered.returncode == 0, answered.stderr
    payload = asked["params"]["payload"]
    assert asked["kind"] == "approval" and payload["subject"]["kind"] == "tool_use"
    assert payload["subject"]["tool"] == "turn/start" and "Allow this turn/start anyway?" in payload["reason"]
    assert asked["params"]["budget"]["budget"] == "tight" and asked["threadId"] == THREAD


async def test_ask_denied_by_a_second_client_refuses_the_turn(tmp_path: Path) -> None:
    async with spent(tmp_path, budgets("ask")) as (daemon, path, owner), connect(path) as second:
        async with trio.open_nursery() as nursery:
            got: list[rpc.RpcError] = []

            async def start() -> None:
                got.append(
                    await refusal(owner, "turn/start", {"threadId": THREAD, "input": [], "clientRequestId": creq(2)})
                )

            nursery.start_soon(start)
            asked = await opened(second)
            await second.request(
                "interaction/respond", {"requestId": asked["requestId"], "result": {"decision": "deny"}}
            )
    (refused,) = got
    assert refused.code == errors.BUDGET_EXCEEDED
    assert refused.message.endswith("turn/start refused: its approval was declined (by socket-2)")
    assert len(owner.of(THREAD, "turn/started")) == 1


async def test_an_allowance_for_the_session_is_journaled_and_holds_after_a_restart(tmp_path: Path) -> None:
    folder, providers = tmp_path / "journal", {"fake": fake_provider("usage")}
    start = {"providerId": "fake", "threadId": THREAD, "cwd": "/tmp", "options": {"model": "m"}}
    daemon_options: dict[str, Any] = {"spending": budgets("ask")}
    async with (
        running(tmp_path, providers, journal=Journal(directory=folder), **daemon_options) as (daemon, path),
        connect(path, never) as owner,
        connect(path) as second,
    ):
        await owner.request("thread/start", start)
        await spend(owner, 1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spend, owner, 2)
            asked = await opened(second)
            answer = {"requestId": asked["requestId"], "result": {"decision": "allow_for_session"}}
            await second.request("interaction/respond", answer)
        await spend(owner, 3)  # past the limit, allowed for the thread: not asked again
        assert sum(method == "interaction/opened" for method, _ in owner.notes) == 1
    async with (
        running(tmp_path, providers, journal=Journal(directory=folder), **daemon_options) as (daemon, path),
        connect(path, never) as owner,
    ):
        await owner.request("thread/start", start)
        with trio.fail_after(10):
            await owner.request("turn/start", {"threadId": THREAD, "input": [], "clientRequestId": creq(4)})
            await owner.wait_for(lambda: bool(owner.of(THREAD, "turn/completed")))
        assert not [method for method, _ in owner.notes if method == "interaction/opened"]
        assert (await owner.request("daemon/status", {}))["budgets"][0]["spent"]["tokens"] > 100


async def test_ask_unanswered_is_declined_at_the_interaction_timeout(tmp_path: Path) -> None:
    provider = fake_provider("usage", interaction_timeout_s=0.5)
    async with spent(tmp_path, budgets("ask"), provider) as (daemon, path, owner):
        with trio.fail_after(10):
            refused = await refusal(owner, "turn/start", {"threadId": THREAD, "input": [], "clientRequestId": creq(2)})
        resolved = [params for method, params in owner.notes if method == "interaction/resolved"]
    assert refused.message.endswith("its approval was declined (no answer in time)")
    assert [r["resolvedBy"] for r in resolved] == ["daemon:timeout"]


# -- a Perspectives run -----------------------------------------------------------------------------------------------


@asynccontextmanager
async def panel_budgets(tmp_path: Path, config: UsageConfig) -> AsyncIterator[tuple[Perspectives, TestClient, Path]]:
    """`test_perspectives_runs.panel_daemon` with budgets, the hidden threads spending tokens (`panel,usage`), the
    calling thread's owner leaving approvals to other clients, and an `ai/complete` already spent on `panel`."""
    text = table()
    (tmp_path / "bbridge.toml").write_text(text, encoding="utf-8")
    settings, _ = load_perspectives(tmp_path / "bbridge.toml")
    assert settings is not None
    room = Perspectives(settings)
    host = load_host(None, None, None, external=room.tools)
    every = {"caller": fake_provider("tool"), "panel": fake_provider("panel,usage")}
    daemon = Daemon(every, text_delta_flush_ms=0, tool_host=host, services=[room], spending=config)
    sock = tmp_path / "bbridge.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, daemon, [server.socket_face(sock), room_face(room)])
        try:
            async with connect(sock, never) as client:
                await client.request(
                    "thread/start", {"providerId": "caller", "threadId": CALLER, "cwd": str(tmp_path), "options": FULL}
                )
                schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
                asked = {"providerId": "panel", "prompt": "The answer?", "outputSchema": schema, "timeoutMs": 10_000}
                assert (await client.request("ai/complete", asked))["ok"] is True
                yield room, client, sock
        finally:
            daemon.request_shutdown()
            with trio.fail_after(20):
                await daemon.stopped.wait()


ON_PANEL = {"scope": "provider", "match": "panel"}
LENSES = {"question": "Q?", "lenses": ["alpha", "beta"]}


async def test_deny_refuses_a_perspectives_launch_before_any_thread_is_made(tmp_path: Path) -> None:
    async with panel_budgets(tmp_path, budgets("deny", **ON_PANEL)) as (room, client, _):
        result = await call(client, "gather_perspectives", LENSES)
        status = await client.request("daemon/status", {"includeHidden": True})
    assert result["success"] is False
    text = text_of(result)
    assert text.startswith('gather_perspectives: Budget "tight" is spent for provider panel: ')
    assert "budgets/check refused" in text and text.endswith("(no thread was created)")
    assert room.runs == {} and status["daemon"]["hiddenThreads"] == 1  # the ai/complete's only


async def test_ask_on_a_perspectives_launch_answered_by_a_second_client(tmp_path: Path) -> None:
    """Allowed: the run launches and delivers (the allowance covers its hidden threads and phases); denied: the
    tool's error result names the budget."""
    async with panel_budgets(tmp_path, budgets("ask", **ON_PANEL)) as (room, client, sock), connect(sock) as second:
        async with trio.open_nursery() as nursery:
            results: list[Any] = []

            async def launch(n: int) -> None:
                results.append(await call(client, "gather_perspectives", LENSES, n))

            nursery.start_soon(launch, 1)
            asked = await opened(second)
            await second.request(
                "interaction/respond", {"requestId": asked["requestId"], "result": {"decision": "allow_once"}}
            )
        (message,) = await delivered(client, room)
        second.notes.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(launch, 3)  # the delivery was the caller's second turn
            asked = await opened(second)
            await second.request(
                "interaction/respond", {"requestId": asked["requestId"], "result": {"decision": "deny"}}
            )
    allowed, denied = results
    assert allowed["success"] is True and message.startswith("Perspectives panel result")
    assert asked["params"]["payload"]["subject"]["tool"] == "budgets/check"
    assert denied["success"] is False and "its approval was declined (by socket-" in text_of(denied)


async def test_warn_on_a_perspectives_launch_warns_the_calling_thread(tmp_path: Path) -> None:
    async with panel_budgets(tmp_path, budgets("warn", **ON_PANEL)) as (room, client, _):
        result = await call(client, "gather_perspectives", LENSES)
        (message,) = await delivered(client, room)
        warnings = [e for e in client.of(CALLER, "system/warning") if e.get("code") == "budget_exceeded"]
    assert result["success"] is True and message.startswith("Perspectives panel result")
    assert warnings and all("budgets/check let through" in w["message"] for w in warnings)


async def test_a_run_budget_stops_a_run_between_its_phases(tmp_path: Path) -> None:
    """Per run: the launch spent nothing yet; the planner's tokens put the run past its limit before the panel."""
    async with panel_budgets(tmp_path, budgets("deny", scope="run", window="run")) as (room, client, _):
        result = await call(client, "gather_perspectives", LENSES)
        (message,) = await delivered(client, room)
    (run,) = room.runs.values()
    assert result["success"] is True and message.startswith("Perspectives panel failed")
    assert "a budget stopped it: Budget" in message and "in this Perspectives run" in message
    assert [m.role for m in run.members] == ["planner"]
