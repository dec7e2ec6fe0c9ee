"""An operator unblocks an agent from the command line (issue 31): `bbridge pending`, `bbridge respond`,
`bbridge stop` on a daemon running on a socket, and `bbridge tail` showing a request asked, answered (by whom)
and resolved by policy."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import trio

from bbridge.client import Notice
from bbridge.daemon.config import echo_provider
from bbridge.ops import Tail, interaction_line
from bbridge.wire import rpc
from bbridge.wire.client_api import DaemonStatus, ThreadPendingResult
from bbridge.wire.interactions import NotOffered, approval_answer
from tests.support import FULL, TestClient, connect, fake_provider, running
from tests.test_ops import bbridge, tailing


async def never(request: rpc.Request) -> Any:
    """The IDE asked never answers: the request stays pending for the operator."""
    await trio.sleep_forever()


async def start(client: TestClient, provider: str, thread_id: str, prompt: str) -> None:
    await client.request(
        "thread/start", {"providerId": provider, "threadId": thread_id, "cwd": "/tmp", "options": FULL}
    )
    params = {"providerId": provider, "threadId": thread_id, "clientRequestId": "creq_abcdefghjk", "options": FULL}
    await client.request("turn/start", {**params, "input": [{"type": "text", "text": prompt, "mentions": []}]})


def opened(client: TestClient) -> list[dict[str, Any]]:
    return [params for method, params in client.notes if method == "interaction/opened"]


def one_line(result: Any) -> str:
    [line] = result.stderr.decode().splitlines()
    return str(line)


async def test_an_approval_is_listed_answered_from_the_command_line_and_tailed(tmp_path: Path) -> None:
    async with (
        running(tmp_path, {"echo": echo_provider()}) as (daemon, path),
        connect(path, never) as client,
        tailing("--socket", str(path), "--thread", "thr_i") as tail,
    ):
        await start(client, "echo", "thr_i", "approve:command please")
        await client.wait_for(lambda: bool(opened(client)))
        request_id = opened(client)[0]["requestId"]

        async with tailing("--socket", str(path), "--thread", "thr_i") as late:  # started while it waits
            await late.until(lambda lines: any(line.startswith(f"  ? approval {request_id}: ") for line in lines))

        listed = await bbridge("pending", "--socket", str(path))
        assert listed.returncode == 0, listed.stderr
        [line] = listed.stdout.decode().splitlines()
        assert line.startswith("thr_i  ") and f"approval {request_id}: run " in line
        assert line.endswith(f"(bbridge respond {request_id} allow_once|allow_for_session|deny)")
        as_json = json.loads((await bbridge("pending", "--socket", str(path), "--thread", "thr_i", "--json")).stdout)
        assert [p["requestId"] for p in as_json["pending"]] == [request_id]

        answered = await bbridge("respond", "--socket", str(path), request_id, "allow_once")
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.decode() == f"answered {request_id} in thread thr_i: allow_once\n"
        await client.wait_for(lambda: client.settled("thr_i"))
        assert client.text("thr_i") == "echo: approve:command please"
        resolved = next(params for method, params in client.notes if method == "interaction/resolved")
        assert resolved["client"] == {"name": "bbridge-cli", "version": "0.1.0"}
        assert resolved["resolvedBy"].startswith("socket-")

        await tail.until(lambda lines: "■ turn completed" in lines)
        asked = [line for line in tail.lines if line.startswith("  ? ")]
        assert asked == [
            f"  ? approval {request_id}: run 'echo approve' in /tmp (echo asks before it answers (command))"
            f" (bbridge respond {request_id} allow_once|allow_for_session|deny)"
        ]
        assert f"  ↳ approval {request_id} answered by {resolved['resolvedBy']} (bbridge-cli 0.1.0): allow_once" in (
            tail.lines
        )

        again = await bbridge("respond", "--socket", str(path), request_id, "deny")
        assert again.returncode == 1
        assert one_line(again).startswith(f"bbridge respond: Request '{request_id}' was already resolved by socket-")
        assert (await bbridge("pending", "--socket", str(path))).stdout == b"no pending requests\n"


async def test_a_question_needs_json_and_a_stop_resolves_by_policy(tmp_path: Path) -> None:
    providers = {"fake": fake_provider("ask"), "echo": echo_provider()}
    async with (
        running(tmp_path, providers) as (daemon, path),
        connect(path, never) as client,
        tailing("--socket", str(path)) as tail,
    ):
        await start(client, "fake", "thr_q", "go")
        await client.wait_for(lambda: bool(opened(client)))
        question = opened(client)[0]["requestId"]
        refused = await bbridge("respond", "--socket", str(path), question, "allow_once")
        assert refused.returncode == 1
        assert one_line(refused) == (
            f"bbridge respond: {question} is a user question, not an approval: answer it with --json RESULT"
            " (bbridge pending --json shows what it asks)"
        )
        answer = {"kind": "user_answer", "answers": {"q1": {"selected": [], "freeText": "yes"}}}
        result = await bbridge("respond", "--socket", str(path), question, "--json", json.dumps(answer))
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode() == f"answered {question} in thread thr_q: answered 1 question\n"
        await client.wait_for(lambda: client.settled("thr_q"))

        await start(client, "echo", "thr_s", "approve:file_change")
        await client.wait_for(lambda: len(opened(client)) == 2)
        approval_id = opened(client)[1]["requestId"]
        stopped = await bbridge("stop", "--socket", str(path), "thr_s")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.decode().startswith("stopped thr_s (echo): interrupted turn ")
        await tail.until(lambda lines: f"[thr_s]   ↳ approval {approval_id} resolved by the daemon's policy"
                         " (daemon:thread-stop): deny" in lines)  # fmt: skip
        assert f"[thr_q]   ? user question {question}: 'Go?' (bbridge respond {question} --json RESULT)" in tail.lines
        assert f"[thr_q]   ↳ user question {question} answered by " in "\n".join(tail.lines)

        unknown = await bbridge("stop", "--socket", str(path), "thr_nope")
        assert unknown.returncode == 1
        assert one_line(unknown) == (
            f"bbridge stop: the daemon on {path} has no thread 'thr_nope' (bbridge status lists its threads)"
        )


def test_a_shorthand_decision_is_the_approval_answer_the_request_offers() -> None:
    grant = {"network": {"enabled": True}, "fileSystem": None}

    def payload(subject: dict[str, Any], offered: list[str]) -> dict[str, Any]:
        return {"kind": "approval", "subject": subject, "reason": None, "availableDecisions": offered}

    command: dict[str, Any] = {
        "kind": "command",
        "itemId": "i",
        "command": "ls",
        "cwd": None,
        "actions": [],
        "sessionGrant": grant,
    }
    permission = {"kind": "permission_grant", "itemId": "i", "toolName": "Bash", "permissions": grant}
    every = ["allow_once", "allow_for_session", "deny"]
    assert approval_answer("req_1", payload(command, every), "allow_once") == {
        "decision": "allow_once",
        "grantedPermissions": None,
    }
    assert approval_answer("req_1", payload(command, every), "allow_for_session") == {
        "decision": "allow_for_session",
        "grantedPermissions": grant,
    }
    assert approval_answer("req_1", payload(permission, every), "allow_once") == {
        "decision": "allow_once",
        "grantedPermissions": grant,
    }
    assert approval_answer("req_1", payload(command, every), "deny") == {"decision": "deny"}
    try:
        approval_answer("req_1", payload(command, ["allow_once", "deny"]), "allow_for_session")
    except NotOffered as exc:
        assert str(exc) == "req_1 does not offer allow_for_session (it offers allow_once, deny)"
    else:
        raise AssertionError("an undeclared decision was accepted")
    tool = {"requestId": "req_2", "kind": "tool_call", "method": "item/tool/call", "params": {"tool": "lookup"}}
    assert (
        interaction_line("interaction/opened", tool)
        == "  ? tool call req_2: tool lookup (bbridge respond req_2 --json RESULT)"
    )


async def test_tail_shows_a_request_pending_at_its_start_once() -> None:
    """Opened after the tail connected but before it asked what is pending: listed, then notified; shown once."""
    opened = {
        "requestId": "req_1",
        "threadId": "thr_x",
        "providerId": "echo",
        "method": "item/tool/call",
        "kind": "tool_call",
        "params": {"tool": "lookup"},
        "openedAt": 1.0,
    }
    resolved = {**opened, "resolvedAt": 2.0, "resolvedBy": "daemon:timeout", "result": {"success": False}}
    del resolved["params"]

    hidden = {**opened, "requestId": "req_h", "threadId": "thr_h"}  # a hidden thread's: never shown

    class Daemon:
        async def status(self, include_hidden: bool = False) -> DaemonStatus:
            rows = [{"threadId": "thr_h", "hidden": True}] if include_hidden else []
            empty: dict[str, Any] = {"providers": [], "pending": 0, "counters": {}, "config": {}, "journal": {}}
            return msgspec.convert({"daemon": {}, "threads": rows, **empty}, DaemonStatus)

        async def pending(self, thread_id: str | None = None) -> ThreadPendingResult:
            listing = [{**opened, "ageS": 0.5}, {**hidden, "ageS": 0.5}]
            return msgspec.convert({"pending": listing}, ThreadPendingResult)

        async def notifications(self) -> AsyncIterator[Notice]:
            yield Notice.of("interaction/opened", opened)
            yield Notice.of("interaction/opened", hidden)
            yield Notice.of("interaction/resolved", resolved)

    out = io.StringIO()
    await Tail(out, as_json=False, thread_id=None).follow(Daemon(), None)  # type: ignore[arg-type]
    assert out.getvalue().splitlines() == [
        "[thr_x]   ? tool call req_1: tool lookup (bbridge respond req_1 --json RESULT)",
        "[thr_x]   ↳ tool call req_1 resolved by the daemon's policy (daemon:timeout): tool failed",
    ]


async def test_a_stop_that_finds_the_turn_already_ended_says_so(tmp_path: Path) -> None:
    """The stop declines the approval, the bridge ends the turn on it and refuses the interrupt: `bbridge stop`
    succeeds and says the turn had already ended (the daemon's `{turnAlreadyEnded: true}`)."""
    async with (
        running(tmp_path, {"fake": fake_provider("approval,strict-stop")}) as (_, path),
        connect(path, never) as client,
    ):
        await start(client, "fake", "thr_race", "go")
        await client.wait_for(lambda: bool(opened(client)))
        turn_id = client.of("thr_race", "turn/started")[0]["scope"]["turnId"]
        stopped = await bbridge("stop", "--socket", str(path), "thr_race")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.decode() == (
            f"stopped thr_race (fake): turn {turn_id} had already ended"
            " (the bridge settled it before the interrupt reached it)\n"
        )
