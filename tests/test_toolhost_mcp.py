"""MCP servers hosted once for every agent (issue 35, item 2): `[mcp_servers.NAME]`, started, listed, called, stopped.

The real server is the npm registry's `@modelcontextprotocol/server-everything`, installed by `make mcp-servers`
into `.cache/mcp/` (its tests skip only when the registry cannot be reached); the error cases use the stdlib MCP
server `tests/mcp_server.py`. Every server runs in the test's own directory, so the processes left can be counted.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.cli import main
from bbridge.daemon.config import load_config
from bbridge.toolhost.mcp import McpServerConfig, McpTool, mcp_server_configs, mcp_servers, tool_call_result, tool_name
from tests.conftest import REPO
from tests.live.processes import leftovers
from tests.live.runner import server_everything

TINY = [sys.executable, str(REPO / "tests" / "mcp_server.py")]


def _config(name: str, command: list[str], cwd: Path, **keys: Any) -> McpServerConfig:
    return McpServerConfig(name=name, source="test", command=command, cwd=str(cwd), **keys)


@pytest.fixture(scope="session")
def everything() -> list[str]:
    return server_everything()


def _tool(tools: list[McpTool], name: str) -> McpTool:
    return next(tool for tool in tools if tool.name == name)


def _text(result: dict[str, Any]) -> str:
    return "".join(item["text"] for item in result["contentItems"] if item["type"] == "inputText")


async def _gone(root: Path) -> dict[int, list[str]]:
    """The processes still running in `root`, after at most 5 s for them to go."""
    for _ in range(100):
        if not leftovers([root]):
            break
        await trio.sleep(0.05)
    return leftovers([root])


# -- the tables ---------------------------------------------------------------------------------------------------


def test_a_table_becomes_a_server_config_with_defaults() -> None:
    tables = {"everything": {"command": ["npx", "server"], "env": {"TOKEN": "x"}, "inherit_env": ["HOME"]}}
    [config], refused = mcp_server_configs(tables, "bb.toml")
    assert refused == []
    assert config.name == "everything" and config.source == "bb.toml [mcp_servers.everything]"
    assert (config.command, config.env, config.inherit_env) == (["npx", "server"], {"TOKEN": "x"}, ["HOME"])
    assert (config.policy, config.timeout_s, config.startup_timeout_s, config.cwd) == ("ask", 60.0, 30.0, None)


def test_a_broken_table_is_refused_with_each_reason_and_the_others_kept() -> None:
    tables = {
        "good": {"command": ["server"], "policy": "allow"},
        "a__b": {"command": ["server"]},
        "bad name": {"command": ["server"]},
        "flat": "server",
        "nocommand": {"policy": "allow"},
        "broken": {
            "command": ["server", ""],
            "env": {"1BAD": "x"},
            "inherit_env": ["A-B"],
            "policy": "sometimes",
            "timeout_s": 0,
            "startup_timeout_s": float("inf"),
            "shell": True,
        },
    }
    configs, refused = mcp_server_configs(tables, "bb.toml")
    assert [config.name for config in configs] == ["good"]
    reasons = {(refusal.section, refusal.key): refusal.error for refusal in refused}
    assert "no '__'" in reasons[("mcp_servers.a__b", None)]
    assert "bad server name" in reasons[("mcp_servers.bad name", None)]
    assert reasons[("mcp_servers.flat", None)] == "expected a table, got str"
    assert reasons[("mcp_servers.nocommand", "command")] == "missing (required)"
    broken = {key for section, key in reasons if section == "mcp_servers.broken"}
    assert broken == {"command", "env", "inherit_env", "policy", "timeout_s", "startup_timeout_s", "shell"}
    assert mcp_server_configs(["x"], "bb.toml")[1][0].error == "expected a table, got list"


def test_tool_names_are_mapped_to_bbs_rule_or_refused() -> None:
    assert tool_name("everything", "get-tiny-image") == "everything__get-tiny-image"
    assert tool_name("fs", "read.file/v2") == "fs__read_file_v2"
    assert tool_name("fs", "x" * 60) == "fs__" + "x" * 60  # 64: the longest bb allows
    assert tool_name("fs", "x" * 61) is None
    assert tool_name("fs", "") is None


def test_mcp_results_become_tool_call_results() -> None:
    result = tool_call_result(
        {
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "iVBORw0=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "mem://a", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "mem://b", "mimeType": "image/gif", "blob": "R0lG"}},
                {"type": "resource", "resource": {"uri": "mem://c", "mimeType": "application/zip", "blob": "UEs="}},
                {"type": "resource_link", "name": "notes", "uri": "file:///notes"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            ],
            "isError": True,
        }
    )
    assert result == {
        "success": False,
        "contentItems": [
            {"type": "inputText", "text": "hello"},
            {"type": "inputImage", "imageUrl": "data:image/png;base64,iVBORw0="},
            {"type": "inputText", "text": "inside"},
            {"type": "inputImage", "imageUrl": "data:image/gif;base64,R0lG"},
            {"type": "inputText", "text": "[resource mem://c (application/zip), not shown]"},
            {"type": "inputText", "text": "[resource link notes: file:///notes]"},
            {"type": "inputText", "text": "[audio content (audio/wav), not shown]"},
        ],
    }
    structured = tool_call_result({"content": [], "structuredContent": {"sum": 3}, "isError": False})
    assert structured == {"success": True, "contentItems": [{"type": "inputText", "text": '{"sum":3}'}]}


# -- the real server ----------------------------------------------------------------------------------------------


async def test_server_everything_tools_are_offered_and_called(everything: list[str], tmp_path: Path) -> None:
    async with mcp_servers([_config("everything", everything, tmp_path, policy="allow")]) as served:
        assert served.refused == []
        names = {tool.name for tool in served.tools}
        assert {"everything__echo", "everything__get-sum", "everything__get-tiny-image"} <= names
        echo = _tool(served.tools, "everything__echo")
        assert echo.schema["properties"]["message"]["type"] == "string"
        assert (echo.policy, echo.presentation) == ("allow", None)
        assert echo.description and "'echo'" in echo.source
        assert await echo.invoke({"message": "hi there"}) == {
            "success": True,
            "contentItems": [{"type": "inputText", "text": "Echo: hi there"}],
        }
        image = await _tool(served.tools, "everything__get-tiny-image").invoke({})
        urls = [item["imageUrl"] for item in image["contentItems"] if item["type"] == "inputImage"]
        assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,iVBOR")
        answers: dict[int, dict[str, Any]] = {}

        async def call(n: int) -> None:
            answers[n] = await echo.invoke({"message": f"call {n}"})

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, 1)
                nursery.start_soon(call, 2)
        assert {n: _text(answer) for n, answer in answers.items()} == {1: "Echo: call 1", 2: "Echo: call 2"}


async def test_a_server_gets_its_env_and_the_allowed_variables_only(
    everything: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BB_MCP_INHERITED", "passed on")
    monkeypatch.setenv("BB_MCP_SECRET", "kept back")
    config = _config("everything", everything, tmp_path, env={"BB_MCP_SET": "set"}, inherit_env=["BB_MCP_INHERITED"])
    async with mcp_servers([config]) as served:
        env = _text(await _tool(served.tools, "everything__get-env").invoke({}))
    assert "BB_MCP_SET" in env and "passed on" in env
    assert "BB_MCP_SECRET" not in env


async def test_a_server_that_cannot_start_is_refused_and_the_others_serve(
    everything: list[str], tmp_path: Path
) -> None:
    configs = [
        _config("everything", everything, tmp_path),
        _config("tiny", TINY, tmp_path),
        _config("missing", [str(tmp_path / "no-such-server")], tmp_path),
        _config("broken", [*TINY, "--broken"], tmp_path),
        _config("mute", [sys.executable, "-c", "import sys; sys.stdin.read()"], tmp_path, startup_timeout_s=0.5),
    ]
    async with mcp_servers(configs) as served:
        running = leftovers([tmp_path])
        reasons = {refusal.section: refusal.error for refusal in served.refused if refusal.key is None}
        assert "No such file or directory" in reasons["mcp_servers.missing"]
        assert reasons["mcp_servers.broken"].endswith("its stderr ends: cannot open the database: no such file")
        assert reasons["mcp_servers.mute"] == "did not start: no answer within 0.5 s (startup_timeout_s)"
        assert {tool.name.split("__")[0] for tool in served.tools} == {"everything", "tiny"}
        assert _text(await _tool(served.tools, "everything__echo").invoke({"message": "still"})) == "Echo: still"
    assert len(running) == 2  # the two that serve; the refused ones were stopped already
    assert await _gone(tmp_path) == {}


# -- the error cases ----------------------------------------------------------------------------------------------


async def test_tiny_server_names_results_and_concurrent_calls(tmp_path: Path) -> None:
    async with mcp_servers([_config("tiny", TINY, tmp_path)]) as served:
        names = [tool.name for tool in served.tools]
        assert names == [
            "tiny__echo",
            "tiny__sleep",
            "tiny__gate",
            "tiny__open",
            "tiny__fail",
            "tiny__resource",
            "tiny__die",
            "tiny__dotted_name",
            "tiny__meta",
        ]
        [refusal] = served.refused
        assert (refusal.section, refusal.key) == ("mcp_servers.tiny", f"tool {'x' * 70!r}")
        assert _tool(served.tools, "tiny__dotted_name").remote == "dotted.name"
        assert await _tool(served.tools, "tiny__fail").invoke({}) == {
            "success": False,
            "contentItems": [{"type": "inputText", "text": "it went wrong"}],
        }
        assert _text(await _tool(served.tools, "tiny__resource").invoke({})) == "noted"
        answers: list[str] = []

        async def gate() -> None:
            answers.append(_text(await _tool(served.tools, "tiny__gate").invoke({})))

        async with trio.open_nursery() as nursery:  # the gate answers only once `open` reaches the server
            nursery.start_soon(gate)
            await trio.sleep(0.1)
            answers.append(_text(await _tool(served.tools, "tiny__open").invoke({})))
        assert sorted(answers) == ["open", "opened"]


async def test_a_call_past_its_timeout_fails_naming_it(tmp_path: Path) -> None:
    async with mcp_servers([_config("tiny", TINY, tmp_path, timeout_s=0.3)]) as served:
        result = await _tool(served.tools, "tiny__sleep").invoke({"seconds": 5})
        assert result == {
            "success": False,
            "contentItems": [
                {"type": "inputText", "text": "MCP server 'tiny' did not answer 'sleep' within 0.3 s (timeout_s)"}
            ],
        }
        assert _text(await _tool(served.tools, "tiny__echo").invoke({"text": "next"})) == "next"


async def test_a_server_that_dies_fails_its_calls_clearly(tmp_path: Path) -> None:
    async with mcp_servers([_config("tiny", TINY, tmp_path)]) as served:
        died = await _tool(served.tools, "tiny__die").invoke({})
        after = await _tool(served.tools, "tiny__echo").invoke({"text": "anyone?"})
        for result in (died, after):
            assert result["success"] is False
            assert _text(result).startswith("MCP server 'tiny' failed the call of ")
            assert "restart the daemon" in _text(result)
        assert await _gone(tmp_path) == {}


async def test_every_server_is_stopped_on_leaving(tmp_path: Path) -> None:
    configs = [_config("one", TINY, tmp_path), _config("two", TINY, tmp_path)]
    async with mcp_servers(configs) as served:
        assert len(served.tools) == 18
        running = leftovers([tmp_path])
        assert len(running) == 2 and all(argv[1].endswith("mcp_server.py") for argv in running.values())
    assert leftovers([tmp_path]) == {}


def test_tools_check_lists_the_servers_tools_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bbridge.toml"
    tiny = ", ".join(f'"{part}"' for part in TINY)
    config.write_text(
        f'[mcp_servers.tiny]\ncommand = [{tiny}]\npolicy = "allow"\n'
        f'[mcp_servers.broken]\ncommand = [{tiny}, "--broken"]\n'
        f"[mcp_servers.worse]\ncommand = []\n"
    )
    assert main(["tools", "check", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "tiny__echo: \n" in out and "tiny__fail: always fails\n" in out
    assert "[mcp_servers.tiny] tool 'fail'; policy allow\n" in out
    assert "refused mcp_servers.broken: did not start: " in out and "cannot open the database" in out
    assert "refused mcp_servers.worse.command: expected a non-empty array" in out
    assert f"refused mcp_servers.tiny.tool {'x' * 70!r}: name cannot be mapped" in out
    assert out.endswith("3 refused; 9 tools would be offered\n")


def test_the_providers_config_leaves_mcp_servers_to_the_tool_host(tmp_path: Path) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text('[providers.echo]\ncommand = ["echo"]\n[mcp_servers.tiny]\ncommand = ["server"]\n')
    providers, report = load_config(config)
    assert list(providers) == ["echo"]
    assert report.refused == []


def test_the_sdk_is_imported_only_to_start_a_server(tmp_path: Path) -> None:
    """Its import is heavy (~0.7 s): loading a configuration with `[mcp_servers]` must not pay it."""
    config = tmp_path / "bbridge.toml"
    config.write_text('[mcp_servers.tiny]\ncommand = ["server"]\n')
    code = (
        "import sys; from pathlib import Path; from bbridge.cli import main; "
        "from bbridge.toolhost.catalog import load_tools; "
        f"assert load_tools(Path({str(config)!r}), None).servers; print(sorted({{'mcp', 'pydantic'}} & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (loaded.returncode, loaded.stdout) == (0, "[]\n"), loaded.stderr


def test_the_docs_example_table_loads() -> None:
    section = (REPO / "docs" / "tools.md").read_text(encoding="utf-8").split("\n## MCP servers\n", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    [config], refused = mcp_server_configs(tomllib.loads(example)["mcp_servers"], "docs/tools.md")
    assert refused == []
    assert config.name == "everything" and config.command[-1] == "stdio"
