"""The tool host (bbridge.toolhost.host): offering, deciding, asking, running, shadowing, reporting."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET

from bbridge.cli import main
from bbridge.seams.tool_host import Approval, Decision, HostedCall
from bbridge.toolhost.audit import Audit
from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.declarations import HostedTool, Icon, Label, Policy, Presentation
from bbridge.toolhost.host import Host, load_host
from bbridge.toolhost.policy import Policies, load_rules

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def _echo(name: str = "echo_args", policy: Policy = "allow", **more: Any) -> HostedTool:
    return HostedTool(
        name=name,
        source="test",
        description="prints its argv",
        command=[sys.executable, "-c", PRINT_ARGV, "{q}"],
        policy=policy,
        **more,
    )


class Asker:
    """A person who answers every ask with `decision`, and remembers what was asked."""

    def __init__(self, decision: Decision = "allow_once") -> None:
        self.decision: Decision = decision
        self.asked: list[dict[str, Any]] = []

    async def __call__(self, details: dict[str, Any]) -> Approval:
        self.asked.append(details)
        return Approval(self.decision, "client-2")


def _call(tmp_path: Path, asker: Asker, tool: str = "echo_args", thread: str = "t1", **arguments: Any) -> HostedCall:
    return HostedCall(thread, "echo", "turn-1", "call-1", tool, arguments, str(tmp_path), asker)


def _texts(result: dict[str, Any]) -> str:
    return "".join(item["text"] for item in result["contentItems"])


async def test_an_allowed_command_tool_runs_end_to_end(tmp_path: Path) -> None:
    host = Host(Catalog([_echo()], [], [], []))
    asker = Asker()
    result = await host.call(_call(tmp_path, asker, q="x; rm -rf ~"))
    assert result["success"] is True
    assert json.loads(_texts(result)) == ["x; rm -rf ~"]
    assert asker.asked == []


async def test_a_denied_tool_does_not_run_and_the_model_reads_why(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tool = HostedTool(
        name="touch", source="test", description="d", command=["touch", str(marker)], policy="deny", env=["PATH"]
    )
    result = await Host(Catalog([tool], [], [], [])).call(_call(tmp_path, Asker(), tool="touch"))
    assert result["success"] is False
    assert "denied by the tool's policy (test)" in _texts(result)
    assert not marker.exists()


async def test_a_deny_rule_is_named_in_the_result(tmp_path: Path) -> None:
    rules, refused = load_rules([{"tool": "echo_*", "decision": "deny", "when": [{"pointer": "/q", "matches": "rm"}]}])
    assert refused == []
    host = Host(Catalog([_echo()], [], [], []), policies=Policies(rules))
    denied = await host.call(_call(tmp_path, Asker(), q="rm -rf /"))
    assert denied["success"] is False
    assert "tool_rules[0]" in _texts(denied)
    allowed = await host.call(_call(tmp_path, Asker(), q="ls"))
    assert allowed["success"] is True


async def test_ask_shows_tool_arguments_and_argv_then_runs_once(tmp_path: Path) -> None:
    host = Host(Catalog([_echo(policy="ask")], [], [], []))
    asker = Asker("allow_once")
    result = await host.call(_call(tmp_path, asker, q="$(id)"))
    assert json.loads(_texts(result)) == ["$(id)"]
    [details] = asker.asked
    assert details == {
        "hostedTool": {
            "tool": "echo_args",
            "arguments": {"q": "$(id)"},
            "argv": [sys.executable, "-c", PRINT_ARGV, "$(id)"],
        }
    }
    await host.call(_call(tmp_path, asker, q="again"))
    assert len(asker.asked) == 2  # allow_once: the next call asks again


async def test_ask_answered_deny_does_not_run(tmp_path: Path) -> None:
    host = Host(Catalog([_echo(policy="ask")], [], [], []))
    result = await host.call(_call(tmp_path, Asker("deny"), q="x"))
    assert result["success"] is False
    assert "declined by client-2" in _texts(result)


async def test_allow_for_session_skips_the_next_ask_on_that_thread_only(tmp_path: Path) -> None:
    host = Host(Catalog([_echo(policy="ask"), _echo("other", policy="ask")], [], [], []))
    asker = Asker("allow_for_session")
    await host.call(_call(tmp_path, asker, q="1"))
    asker.decision = "deny"
    second = await host.call(_call(tmp_path, asker, q="2"))
    assert second["success"] is True
    assert len(asker.asked) == 1
    other_thread = await host.call(_call(tmp_path, asker, thread="t2", q="3"))
    assert other_thread["success"] is False
    other_tool = await host.call(_call(tmp_path, asker, tool="other", q="4"))
    assert other_tool["success"] is False
    assert len(asker.asked) == 3
    host.forget("t1")
    await host.call(_call(tmp_path, asker, q="5"))
    assert len(asker.asked) == 4  # the grant ended with the thread


async def test_a_session_grant_never_lifts_a_deny_rule(tmp_path: Path) -> None:
    rules, _ = load_rules([{"tool": "echo_args", "decision": "deny", "when": [{"pointer": "/q", "matches": "^bad"}]}])
    host = Host(Catalog([_echo(policy="ask")], [], [], []), policies=Policies(rules))
    asker = Asker("allow_for_session")
    await host.call(_call(tmp_path, asker, q="good"))
    result = await host.call(_call(tmp_path, asker, q="bad"))
    assert result["success"] is False
    assert len(asker.asked) == 1


class FakeExternal:
    def __init__(self, name: str, policy: Policy = "allow") -> None:
        self.name = name
        self.description = "an external tool"
        self.schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
        self.presentation: Presentation | None = None
        self.policy: Policy = policy
        self.source = f"mcp_servers.fake ({name})"
        self.calls: list[dict[str, Any]] = []
        self.callers: list[HostedCall] = []

    async def invoke(self, arguments: dict[str, Any], call: HostedCall) -> dict[str, Any]:
        self.calls.append(arguments)
        self.callers.append(call)
        return {"success": True, "contentItems": [{"type": "inputText", "text": "token sk-123456 here"}]}


async def test_external_tools_are_decided_redacted_and_shadowed(tmp_path: Path) -> None:
    from bbridge.toolhost.audit import Redactor
    from bbridge.toolhost.policy import compile_pattern

    external = FakeExternal("fake__lookup", policy="ask")
    shadowed = FakeExternal("echo_args")
    audit = Audit(None, Redactor((compile_pattern(r"sk-\d+"),)))
    host = Host(Catalog([_echo()], [], [], []), external=[external, shadowed], audit=audit)
    assert [tool.name for tool in host.offered()] == ["echo_args", "fake__lookup"]
    asker = Asker()
    call = _call(tmp_path, asker, tool="fake__lookup", a="b")
    result = await host.call(call)
    assert _texts(result) == "token [redacted] here"
    assert external.calls == [{"a": "b"}]
    assert external.callers == [call]  # an external tool knows the calling thread
    assert asker.asked == [
        {"hostedTool": {"tool": "fake__lookup", "arguments": {"a": "b"}, "source": "mcp_servers.fake (fake__lookup)"}}
    ]
    report = host.report()
    assert report["shadowed"] == [{"name": "echo_args", "kept": "test", "shadowed": "mcp_servers.fake (echo_args)"}]
    assert [(t["name"], t["kind"]) for t in report["tools"]] == [("echo_args", "command"), ("fake__lookup", "external")]


async def test_an_unknown_tool_is_a_failed_result(tmp_path: Path) -> None:
    result = await Host(Catalog([], [], [], [])).call(_call(tmp_path, Asker(), tool="nope"))
    assert result["success"] is False
    assert "not a tool this daemon hosts" in _texts(result)


def test_offered_tools_carry_their_presentation() -> None:
    shown = Presentation(label=Label(pending="Echoing", completed="Echoed"), icon=Icon(glyph="Search"))
    host = Host(Catalog([_echo(presentation=shown), _echo("bare")], [], [], []))
    first, bare = host.offered()
    assert first.inputSchema == {"type": "object", "properties": {}}
    assert first.presentation.label.pending == "Echoing"  # type: ignore[union-attr]
    assert first.presentation.icon.glyph == "Search"  # type: ignore[union-attr]
    assert bare.presentation is UNSET


CONFIG = """
[tools.echo_args]
description = "prints its argv"
command = ["echo", "{q}"]

[[tool_rules]]
tool = "echo_*"
decision = "allow"

[[tool_rules]]
tool = "*"
when = [{ pointer = "/q", matches = "(a+)+$" }]
decision = "deny"

[tool_audit]
redact = ["secret"]
"""


def test_load_host_reads_rules_and_audit_and_refuses_a_risky_rule(tmp_path: Path) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text(CONFIG, encoding="utf-8")
    host = load_host(config, None, tmp_path)
    report = host.report()
    assert report["rules"] == ["tool_rules[0] (tool = 'echo_*', decision = 'allow')"]
    assert report["audit"] == str(tmp_path / "tool-audit.ndjson")
    [refusal] = report["refused"]
    assert refusal["section"] == "tool_rules[1]" and refusal["key"] == "when[0]"
    assert "repetition inside a repetition" in refusal["error"]
    assert load_host(config, None, None).report()["audit"] is None


def test_tools_check_lists_rules_and_refused_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text(CONFIG, encoding="utf-8")
    assert main(["tools", "check", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "rule tool_rules[0] (tool = 'echo_*', decision = 'allow')" in out
    assert "refused tool_rules[1].when[0]: a repetition inside a repetition" in out


def test_the_tool_sections_are_known_to_the_providers_loader(tmp_path: Path) -> None:
    from bbridge.daemon.config import load_config

    config = tmp_path / "bbridge.toml"
    config.write_text(CONFIG + '[mcp_servers.fs]\ncommand = ["x"]\n[elsewhere]\n', encoding="utf-8")
    assert [refusal.section for refusal in load_config(config).report.refused] == ["elsewhere"]


def test_serve_strict_config_refuses_a_broken_rule(tmp_path: Path) -> None:
    from tests.test_config import bbridge

    config = tmp_path / "bbridge.toml"
    config.write_text(CONFIG, encoding="utf-8")
    result = bbridge("serve", "--config", str(config), "--strict-config", cwd=tmp_path)
    assert result.returncode == 2
    assert "refused tool_rules[1].when[0]: a repetition inside a repetition" in result.stderr


def test_serve_hosts_nothing_without_tools(tmp_path: Path) -> None:
    from bbridge.serving import _tool_host

    assert _tool_host(None, None, tmp_path) is None
    config = tmp_path / "bbridge.toml"
    config.write_text(CONFIG, encoding="utf-8")
    host = _tool_host(config, None, None)
    assert host is not None and [tool.name for tool in host.offered()] == ["echo_args"]
    host.close()
