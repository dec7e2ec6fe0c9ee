"""Agent configuration applied by the daemon (issue 47): `[[agents]]` resolved before every construction and turn
and checked on what the bridge receives (its recorded runtime lane), the hosted tools it selects, a failing
contribution warned once, `skills/configure` after `initialize`, the hosted `skill` tool for a bridge that takes no
skill roots, `agent/configuration` agreeing with `bbridge config explain`, and the status note of changed
instructions. The bridges are `tests/fakes/fake_bridge.py`; the configuration is a real `bbridge.toml` read by
`bbridge.agents`."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from bbridge.agents.config import load_agents
from bbridge.agents.resolve import Agents
from bbridge.client import Client
from bbridge.seams.tool_host import HostedCall
from bbridge.wire import errors, protocol, rpc
from bbridge.wire.lanes import read_lane
from tests.support import connect, fake_provider, running
from tests.test_declared_tools import bridge_got, call_turn, completed

CONFIG = """
[[agents]]
id = "everyone"
instructions = { mode = "prepend", text = "Be careful." }

[[agents]]
id = "payments-rules"
scope = { project = "{root}/payments/**" }
when = { provider = ["fake"] }
instructions = { mode = "append", text = "Never touch migrations/." }
tools = { exclude = ["deploy"] }
env = { BB_REVIEW_MODE = "strict" }

[[agents]]
id = "web-only"
scope = { project = "{root}/web/**" }
instructions = { mode = "replace", file = "web.md" }
tools = { include = ["grep_repo", "deploy"] }

[[agents]]
id = "other-provider"
when = { provider = ["other"] }
env = { BB_OTHER = "1" }
"""


REPO = Path(__file__).resolve().parents[1]


def config(tmp_path: Path, text: str = CONFIG) -> Path:
    for project in ("payments", "web"):
        (tmp_path / project).mkdir(exist_ok=True)
    (tmp_path / "web.md").write_text("Only the web app.\n", encoding="utf-8")
    path = tmp_path / "bbridge.toml"
    path.write_text(text.replace("{root}", str(tmp_path)), encoding="utf-8")
    return path


def agents(path: Path, tmp_path: Path) -> Agents:
    resolver = Agents(load_agents(path), state_dir=tmp_path / "state")
    assert resolver.refused() == []
    return resolver


def tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool", "inputSchema": {"type": "object"}}


class Host:
    """A `ToolHost` of three tools, each answering its name and arguments."""

    def offered(self) -> list[protocol.DynamicTool]:
        return [protocol.DynamicTool(**tool(name)) for name in ("grep_repo", "deploy", "clock")]

    async def call(self, call: HostedCall) -> dict[str, Any]:
        return {"success": True, "contentItems": [{"type": "inputText", "text": f"{call.tool} ran"}]}

    async def open_thread(self, thread_id: str, brought: list[Any], cwd: str | None) -> list[protocol.DynamicTool]:
        return []

    def forget(self, thread_id: str) -> None:
        pass

    def report(self) -> dict[str, Any]:
        return {"served": ["grep_repo", "deploy", "clock"], "refused": [], "shadowed": []}


def start(provider: str, thread: str, cwd: Path, **options: Any) -> dict[str, Any]:
    return {
        "providerId": provider,
        "threadId": thread,
        "cwd": str(cwd),
        "options": {"permissionMode": "full", **options},
    }


def sent(record: Path, provider: str, scope: str, method: str) -> list[dict[str, Any]]:
    """The params of each `method` request the bridge was sent in `scope` (a thread, or `_process`)."""
    lane = read_lane(record / provider / scope / "runtime→bridge.ndjson", "runtime→bridge")
    messages = [json.loads(entry.line) for entry in lane]
    return [message["params"] for message in messages if message.get("method") == method]


def names(params: dict[str, Any]) -> list[str]:
    return [t["name"] for t in params.get("dynamicTools", [])]


async def test_each_thread_gets_exactly_its_contributions(tmp_path: Path) -> None:
    """Two projects and two providers: what each construction's bridge receives is its contributions composed
    (prepend, the client's own, append; a replace over all before it), the selection over the hosted tools
    (exclude beats include, the client narrowing further), and the BB_* variables over the client's."""
    path = config(tmp_path)
    providers = {"fake": fake_provider(), "other": fake_provider()}
    record = tmp_path / "rec"
    async with (
        running(tmp_path, providers, agents=agents(path, tmp_path), tool_host=Host(), record_dir=record) as (
            _,
            sock,
        ),
        connect(sock) as client,
    ):
        pay = tmp_path / "payments" / "api"
        pay.mkdir()
        await client.request(
            "thread/start", start("fake", "thr_pay", pay, instructions="Client says hi.", envVars={"BB_X": "1"})
        )
        await client.request("thread/start", start("other", "thr_pay_other", pay))
        await client.request("thread/start", start("fake", "thr_web", tmp_path / "web", tools={"include": ["deploy"]}))
        await client.request("thread/start", start("fake", "thr_elsewhere", tmp_path))

    (pay_params,) = sent(record, "fake", "thr_pay", "thread/start")
    assert pay_params["options"]["instructions"] == "Be careful.\n\nClient says hi.\n\nNever touch migrations/."
    assert pay_params["options"]["envVars"] == {"BB_X": "1", "BB_REVIEW_MODE": "strict"}
    assert "instructionMode" not in pay_params
    assert names(pay_params) == ["grep_repo", "clock"]  # `deploy` excluded

    (other,) = sent(record, "other", "thr_pay_other", "thread/start")
    assert other["options"]["instructions"] == "Be careful."  # payments-rules is for `fake` only
    assert other["options"]["envVars"] == {"BB_OTHER": "1"}
    assert names(other) == ["grep_repo", "deploy", "clock"]

    (web,) = sent(record, "fake", "thr_web", "thread/start")
    assert web["options"]["instructions"] == "Only the web app."  # the replace wins over the prepend
    assert web["instructionMode"] == "replace"
    assert names(web) == ["deploy"]  # the configuration's include, narrowed further by the client's
    assert "tools" not in web["options"]

    (elsewhere,) = sent(record, "fake", "thr_elsewhere", "thread/start")
    assert elsewhere["options"] == {"permissionMode": "full", "instructions": "Be careful."}


async def test_turns_carry_the_configuration_and_a_changed_one_is_noted(tmp_path: Path) -> None:
    """Options ride every turn: a turn/start gets the resolved instructions and variables too. Instructions are
    frozen per provider session: once what resolves differs from what the session was built with, the thread's
    status row says so, and the turn goes on."""
    path = config(tmp_path)
    record = tmp_path / "rec"
    resolver = agents(path, tmp_path)
    async with (
        running(tmp_path, {"fake": fake_provider()}, agents=resolver, record_dir=record) as (
            daemon,
            sock,
        ),
        connect(sock) as client,
    ):
        await client.request("thread/start", start("fake", "thr_web", tmp_path / "web"))
        turn = {**call_turn(None, 1, "thr_web"), "options": {"permissionMode": "full"}}
        await client.request("turn/start", turn)
        await client.wait_for(lambda: completed(client, "thr_web", 1))
        (row,) = [t for t in daemon.status()["threads"] if t["threadId"] == "thr_web"]
        assert row["agentConfig"] == {"applied": ["everyone", "web-only"], "failed": []}
        (tmp_path / "web.md").write_text("The web app, and its tests.\n", encoding="utf-8")
        turn = {**call_turn(None, 2, "thr_web"), "options": {"permissionMode": "full"}}
        await client.request("turn/start", turn)
        await client.wait_for(lambda: completed(client, "thr_web", 2))
        (row,) = [t for t in daemon.status()["threads"] if t["threadId"] == "thr_web"]
        assert row["agentConfig"]["note"].startswith("instructions changed; applied at the next construction")
    first, second = sent(record, "fake", "thr_web", "turn/start")
    assert first["options"]["instructions"] == "Only the web app."
    assert second["options"]["instructions"] == "The web app, and its tests."


async def test_a_failing_contribution_is_dropped_with_one_warning_and_the_rest_apply(tmp_path: Path) -> None:
    path = config(tmp_path)
    (tmp_path / "web.md").unlink()  # web-only's file is gone: it fails, on every turn, warned once
    record = tmp_path / "rec"
    async with (
        running(tmp_path, {"fake": fake_provider()}, agents=agents(path, tmp_path), record_dir=record) as (
            daemon,
            sock,
        ),
        connect(sock) as client,
    ):
        await client.request("thread/start", start("fake", "thr_web", tmp_path / "web"))
        for n in (1, 2):
            await client.request("turn/start", {**call_turn(None, n, "thr_web"), "options": {"permissionMode": "full"}})
            await client.wait_for(functools.partial(completed, client, "thr_web", n))
        warnings = [e for e in client.events("thr_web") if e["type"] == "system/warning"]
        status = daemon.status()
    (warning,) = warnings
    assert warning["code"] == "agent_config_failed" and warning["details"]["contribution"] == "web-only"
    assert 'Agent configuration "web-only" was left out of this turn' in warning["message"]
    assert "web.md" in warning["message"]
    (start_params,) = sent(record, "fake", "thr_web", "thread/start")
    assert start_params["options"]["instructions"] == "Be careful."  # the others apply
    assert "instructionMode" not in start_params
    assert [error["id"] for error in status["agentConfig"]["errors"]] == ["web-only"]
    (row,) = [t for t in status["threads"] if t["threadId"] == "thr_web"]
    assert row["agentConfig"]["failed"] == ["web-only"]


SKILLS = """
[skills]
native = ["native"]

[skills.roots.team]
path = "{root}/skills"

[[agents]]
id = "reviewers"
skills = ["team:review-checklist"]
"""


def skill_root(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "review-checklist"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: review-checklist\ndescription: How we review.\n---\n\n1. Read the diff twice.\n", encoding="utf-8"
    )
    (skill / "extra.md").write_text("more\n", encoding="utf-8")


async def test_a_bridge_that_takes_skill_roots_is_sent_them_after_initialize(tmp_path: Path) -> None:
    skill_root(tmp_path)
    path = config(tmp_path, SKILLS)
    record = tmp_path / "rec"
    providers = {"native": fake_provider("skills")}
    async with (
        running(tmp_path, providers, agents=agents(path, tmp_path), record_dir=record) as (
            daemon,
            sock,
        ),
        connect(sock) as client,
    ):
        await client.request("thread/start", start("native", "thr_1", tmp_path))
        await client.request("thread/start", start("native", "thr_2", tmp_path))
        assert daemon.registry.hosted_of("thr_1") == set()  # it loads skills itself: no `skill` tool
    (configured,) = sent(record, "native", "_process", "skills/configure")  # once per process
    (root,) = configured["roots"]
    assert root["id"] == "team" and root["skills"] == []
    assert (Path(root["path"]) / "review-checklist" / "SKILL.md").is_file()  # a root of links to accepted skills


async def test_a_bridge_refusing_skill_roots_fails_its_start_saying_so(tmp_path: Path) -> None:
    skill_root(tmp_path)
    path = config(tmp_path, SKILLS)
    async with (
        running(tmp_path, {"native": fake_provider()}, agents=agents(path, tmp_path)) as (
            _,
            sock,
        ),
        connect(sock) as client,
    ):
        try:
            await client.request("thread/start", start("native", "thr_1", tmp_path))
        except rpc.RpcError as exc:
            assert exc.code == errors.BRIDGE_START_FAILED
            assert "refused skills/configure (skill roots: team)" in exc.message
            assert "[skills.roots]" in exc.message
        else:
            raise AssertionError("the start should have failed")


async def test_a_bridge_without_skill_roots_gets_the_hosted_skill_tool(tmp_path: Path) -> None:
    skill_root(tmp_path)
    path = config(tmp_path, SKILLS)
    record = tmp_path / "rec"
    async with (
        running(tmp_path, {"fake": fake_provider("tool")}, agents=agents(path, tmp_path), record_dir=record) as (
            _,
            sock,
        ),
        connect(sock) as client,
    ):
        await client.request("thread/start", start("fake", "thr_1", tmp_path))  # no skills/configure: it would fail
        await client.request(
            "turn/start", call_turn({"tool": "skill", "arguments": {"name": "review-checklist"}}, 1, "thr_1")
        )
        await client.wait_for(lambda: completed(client, "thr_1", 1))
        read = bridge_got(client, "thr_1", 1)
        await client.request("turn/start", call_turn({"tool": "skill", "arguments": {"name": "deploy"}}, 2, "thr_1"))
        await client.wait_for(lambda: completed(client, "thr_1", 2))
        unknown = bridge_got(client, "thr_1", 2)
    (params,) = sent(record, "fake", "thr_1", "thread/start")
    (skill,) = [t for t in params["dynamicTools"] if t["name"] == "skill"]
    assert "team:review-checklist (How we review.)" in skill["description"]
    text = read["contentItems"][0]["text"]
    assert read["success"] is True and "1. Read the diff twice." in text and "extra.md" in text
    assert unknown["success"] is False and "team:review-checklist" in unknown["contentItems"][0]["text"]


async def test_agent_configuration_and_config_explain_agree(tmp_path: Path) -> None:
    path = config(tmp_path)
    pay = tmp_path / "payments"
    async with (
        running(tmp_path, {"fake": fake_provider()}, agents=agents(path, tmp_path)) as (
            _,
            sock,
        ),
        connect(sock) as client,
    ):
        given = await client.request("agent/configuration", {"cwd": str(pay), "providerId": "fake"})
        await client.request("thread/start", start("fake", "thr_pay", pay))
        of_thread = await client.request("agent/configuration", {"threadId": "thr_pay"})
        try:
            await client.request("agent/configuration", {"threadId": "thr_nobody"})
        except rpc.RpcError as exc:
            assert exc.code == errors.UNKNOWN_THREAD and "give {cwd, providerId, model?}" in exc.message
        else:
            raise AssertionError("an unknown thread should be refused")
    command = ["config", "explain", "--cwd", str(pay), "--provider", "fake", "--json", "--config", str(path)]
    explained = subprocess.run(
        [sys.executable, "-m", "bbridge", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(explained.stdout) == given == of_thread
    async with running(tmp_path, {"fake": fake_provider()}, agents=agents(path, tmp_path)) as (_, sock):
        async with Client.connect(sock) as typed:  # the Python client's typed call answers the same
            await typed.initialize()
            answer = await typed.agent_configuration(cwd=str(pay), provider_id="fake")
    assert msgspec.to_builtins(answer) == given and answer.tools.allows("grep_repo")
    assert [(c["id"], c["applied"]) for c in given["contributions"]] == [
        ("everyone", True),
        ("payments-rules", True),
        ("web-only", False),
        ("other-provider", False),
    ]
    assert given["envVars"] == {"BB_REVIEW_MODE": "strict"} and given["tools"] == {"include": [], "exclude": ["deploy"]}


async def test_a_daemon_without_agent_configuration_changes_nothing(tmp_path: Path) -> None:
    record = tmp_path / "rec"
    async with (
        running(tmp_path, {"fake": fake_provider()}, record_dir=record) as (daemon, sock),
        connect(sock) as client,
    ):
        await client.request("thread/start", start("fake", "thr_1", tmp_path, instructions="mine"))
        empty = await client.request("agent/configuration", {"threadId": "thr_1"})
        assert "agentConfig" not in daemon.status()
    (params,) = sent(record, "fake", "thr_1", "thread/start")
    assert params["options"] == {"permissionMode": "full", "instructions": "mine"}
    assert empty["contributions"] == [] and empty["instructions"] == {"text": "", "mode": "append"}
