"""The `[tools.NAME]` tables of bbridge.toml, the argv filling, and `bbridge tools check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bbridge.cli import main
from bbridge.config_file import ConfigError
from bbridge.daemon.config import Refusal, load_config
from bbridge.toolhost.argv import fill
from bbridge.toolhost.catalog import load_tools
from bbridge.toolhost.declarations import HostedTool, Icon, Label, Presentation

GREP = """
[tools.grep_repo]
description = "Search the repository"
schema = { type = "object", properties = { q = { type = "string" } }, required = ["q"] }
command = ["rg", "--max-count", "{limit}", "--", "{q}"]
defaults = { limit = "50" }
policy = "allow"
timeout_s = 30
max_output_bytes = 262144
env = ["PATH", "HOME"]
presentation = { label = { pending = "Searching", completed = "Searched" }, icon = { glyph = "Search" }, intent = "search" }
retry = { on_error = true, on_empty = false, max_attempts = 2 }
"""

MINIMAL = """
[tools.{name}]
description = "d"
command = ["echo", "{{x}}"]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bbridge.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_table_is_loaded_with_every_key(tmp_path: Path) -> None:
    catalog = load_tools(_write(tmp_path, GREP), None)
    assert catalog.refused == []
    [tool] = catalog.tools
    assert tool.name == "grep_repo"
    assert tool.command == ["rg", "--max-count", "{limit}", "--", "{q}"]
    assert tool.policy == "allow"
    assert tool.timeout_s == 30
    assert tool.max_output_bytes == 262144
    assert tool.env == ["PATH", "HOME"]
    assert tool.presentation == Presentation(label=Label("Searching", "Searched"), icon=Icon("Search"), intent="search")
    assert tool.retry.on_error and tool.retry.max_attempts == 2
    assert tool.argv({"q": "needle"}) == ["rg", "--max-count", "50", "--", "needle"]
    assert tool.source.endswith("bbridge.toml [tools.grep_repo]")


def test_the_defaults_are_ask_and_sixty_seconds(tmp_path: Path) -> None:
    [tool] = load_tools(_write(tmp_path, MINIMAL.format(name="t")), None).tools
    assert (tool.policy, tool.timeout_s, tool.env) == ("ask", 60.0, [])
    assert tool.schema["type"] == "object"


@pytest.mark.parametrize(
    ("body", "key", "error"),
    [
        ('description = "d"\ncommand = "rg -n"', "command", "Expected `array`"),
        ('description = "d"\ncommand = []', "command", "non-empty array"),
        ('description = "d"\ncommand = ["a", ""]', "command", "non-empty array"),
        ('command = ["a"]', "description", "missing (required)"),
        ('description = "d"\ncommand = ["a"]\npolicy = "maybe"', "policy", "Invalid enum value 'maybe'"),
        ('description = "d"\ncommand = ["a"]\ntimeout_s = 0', "timeout_s", "positive, finite"),
        ('description = "d"\ncommand = ["a"]\nmax_output_bytes = -1', "max_output_bytes", "positive number"),
        ('description = "d"\ncommand = ["a"]\nenv = ["PATH", "A=B"]', "env", "'A=B'"),
        ('description = "d"\ncommand = ["a"]\nschema = { type = "string" }', "schema", "object schema"),
        (
            'description = "d"\ncommand = ["a"]\nschema = { type = "object", properties = 5 }',
            "schema",
            "invalid JSON Schema",
        ),
        (
            'description = "d"\ncommand = ["a"]\nschema = { type = "object", required = "q" }',
            "schema",
            "invalid JSON Schema",
        ),
        ('description = "d"\ncommand = ["a"]\nretry = { max_attempts = 0 }', "retry", "at least 1"),
        ('description = "d"\ncommand = ["a"]\nretry = { again = true }', "retry", "unknown field `again`"),
        (
            'description = "d"\ncommand = ["a"]\npresentation = { intent = "dance" }',
            "presentation",
            "Invalid enum value",
        ),
        ('description = "d"\ncommand = ["a"]\nshell = true', "shell", "unknown key"),
    ],
)
def test_a_broken_table_is_refused_by_key_and_the_others_load(tmp_path: Path, body: str, key: str, error: str) -> None:
    catalog = load_tools(_write(tmp_path, f"[tools.broken]\n{body}\n" + MINIMAL.format(name="good")), None)
    assert [tool.name for tool in catalog.tools] == ["good"]
    [refusal] = catalog.refused
    assert (refusal.section, refusal.key) == ("tools.broken", key)
    assert error in refusal.error


@pytest.mark.parametrize("name", ["has space", "dot.ted", "x" * 65, "ünï"])
def test_a_bad_name_is_refused(tmp_path: Path, name: str) -> None:
    catalog = load_tools(_write(tmp_path, MINIMAL.format(name=f'"{name}"')), None)
    assert catalog.tools == []
    assert catalog.refused == [Refusal(f"tools.{name}", None, "bad tool name (expected 1 to 64 of A-Z a-z 0-9 _ -)")]


def test_a_name_of_64_allowed_characters_is_kept(tmp_path: Path) -> None:
    name = "A-z_9" + "x" * 59
    assert [t.name for t in load_tools(_write(tmp_path, MINIMAL.format(name=name)), None).tools] == [name]


def test_a_tool_that_is_not_a_table_is_refused_whole(tmp_path: Path) -> None:
    catalog = load_tools(_write(tmp_path, "[tools]\nx = 5\n"), None)
    assert catalog.refused == [Refusal("tools.x", None, "expected a table, got int")]


@pytest.mark.parametrize("content", [None, "tools = 5\n", "[tools\n"])
def test_an_unusable_file_raises(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "bbridge.toml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bbridge\.toml"):
        load_tools(path, None)


# -- argv --------------------------------------------------------------------

HOSTILE = ["x; rm -rf ~", "$(id)", "two words", 'it\'s "quoted"', "`id`", "a\nb", "{q}"]


@pytest.mark.parametrize("value", HOSTILE)
def test_an_argument_is_one_literal_argv_element(value: str) -> None:
    assert fill(["rg", "--", "{q}"], {"q": value}) == ["rg", "--", value]
    assert fill(["--pattern={q}!"], {"q": value}) == [f"--pattern={value}!"]


def test_arguments_then_defaults_then_empty() -> None:
    template = ["{a}", "{b}", "{c}", "{a}-{b}"]
    assert fill(template, {"a": "arg"}, {"a": "default a", "b": "default b"}) == [
        "arg",
        "default b",
        "",
        "arg-default b",
    ]


def test_a_value_that_is_not_a_string_is_its_json_text() -> None:
    assert fill(["{n}", "{t}", "{l}", "{z}"], {"n": 5, "t": True, "l": ["a", 1], "z": None}) == [
        "5",
        "true",
        '["a",1]',
        "",
    ]


def test_a_hosted_tool_fills_bound_values_ahead_of_the_arguments() -> None:
    tool = HostedTool(
        name="t",
        source="here",
        description="d",
        command=["{entry}", "{q}"],
        bound={"entry": "/b/run"},
        defaults={"q": "dq"},
    )
    assert tool.argv({"entry": "/bin/sh"}) == ["/b/run", "dq"]


# -- bbridge tools check -----------------------------------------------------


def test_tools_check_prints_each_tool_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "check", "--config", str(_write(tmp_path, GREP))]) == 0
    out = capsys.readouterr().out
    assert "grep_repo: Search the repository" in out
    assert "[tools.grep_repo]; policy allow" in out
    assert 'argv ["rg","--max-count","{limit}","--","{q}"]' in out
    assert out.endswith("ok: 1 tools\n")


def test_tools_check_prints_refusals_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, GREP + '[tools.bad]\ndescription = "d"\ncommand = []\n')
    assert main(["tools", "check", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "refused tools.bad.command: expected a non-empty array of non-empty strings" in out
    assert out.endswith("1 refused; 1 tools would be offered\n")


@pytest.mark.parametrize("content", [None, "[tools\n"])
def test_tools_check_unusable_file_exits_2(
    tmp_path: Path, content: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bbridge.toml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["tools", "check", "--config", str(path)]) == 2
    assert "bbridge: " in capsys.readouterr().err


def test_tools_check_reads_bbridge_toml_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, GREP)
    monkeypatch.chdir(tmp_path)
    assert main(["tools", "check"]) == 0
    assert "grep_repo" in capsys.readouterr().out


def test_the_providers_loader_knows_the_tools_section(tmp_path: Path) -> None:
    """`[tools]` beside `[providers]` in one bbridge.toml is not an unknown section to `config check` and `serve`."""
    path = tmp_path / "bbridge.toml"
    path.write_text('[tools.grep_repo]\ndescription = "Search"\ncommand = ["rg", "{q}"]\n[other]\nx = 1\n')
    refused = [refusal.section for refusal in load_config(path).report.refused]
    assert refused == ["other"]
