"""Plugin bundles (`DIR/<name>/plugin.json`): the entry's confinement, the template's split, the shadowing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bbridge.cli import main
from bbridge.config_file import ConfigError
from bbridge.toolhost.bundles import load_bundles
from bbridge.toolhost.catalog import Shadowing, load_tools


def _bundle(root: Path, directory: str, *, executable: bool = True, **manifest: Any) -> Path:
    bundle = root / directory
    bundle.mkdir(parents=True)
    entry = bundle / "run.sh"
    entry.write_text("#!/bin/sh\n", encoding="utf-8")
    entry.chmod(0o755 if executable else 0o644)
    fields = {"name": directory, "description": f"the {directory} tool", "entry": "run.sh", "command": "{entry}"}
    (bundle / "plugin.json").write_text(json.dumps(fields | manifest), encoding="utf-8")
    return bundle


def test_a_bundle_is_loaded_with_its_template_split_before_substitution(tmp_path: Path) -> None:
    bundle = _bundle(
        tmp_path,
        "websearch",
        version="1.0.0",
        command='{entry} search bing "{query}" --limit {limit} --dir={dir}',
        defaults={"limit": "5"},
        schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        retry={"on_error": True, "max_attempts": 3, "param_fallbacks": {"limit": ["10", "20"]}},
    )
    [tool] = load_bundles(tmp_path).tools
    assert (tool.name, tool.description, tool.policy, tool.source) == (
        "websearch",
        "the websearch tool",
        "ask",
        str(bundle),
    )
    assert tool.retry.param_fallbacks == {"limit": ["10", "20"]}
    entry = str((bundle / "run.sh").resolve())
    for hostile in ["x; rm -rf ~", "$(id)", "two words", 'it\'s "quoted"']:
        argv = tool.argv({"query": hostile})
        assert argv == [entry, "search", "bing", hostile, "--limit", "5", f"--dir={bundle.resolve()}"]
    assert tool.argv({"query": "q", "limit": 7})[5] == "7"
    assert tool.argv({})[3] == ""


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("../x", "expected a plain file name"),
        ("sub/run.sh", "expected a plain file name"),
        ("/bin/sh", "expected a plain file name"),
        ("..", "expected a plain file name"),
        ("", "expected a plain file name"),
        ("absent.sh", "missing"),
    ],
)
def test_a_bad_entry_refuses_its_bundle_and_the_others_load(tmp_path: Path, entry: str, error: str) -> None:
    _bundle(tmp_path, "bad", entry=entry)
    _bundle(tmp_path, "good")
    found = load_bundles(tmp_path)
    assert [tool.name for tool in found.tools] == ["good"]
    [refusal] = found.refused
    assert refusal.section == str(tmp_path / "bad")
    assert error in refusal.error


def test_an_entry_symlinked_out_of_the_bundle_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.sh"
    outside.write_text("#!/bin/sh\n", encoding="utf-8")
    outside.chmod(0o755)
    bundle = _bundle(tmp_path / "tools", "escape", entry="link.sh")
    (bundle / "link.sh").symlink_to(outside)
    _bundle(tmp_path / "tools", "good")
    found = load_bundles(tmp_path / "tools")
    assert [tool.name for tool in found.tools] == ["good"]
    assert "outside the bundle" in found.refused[0].error


def test_a_symlink_inside_the_bundle_is_followed(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "inner", entry="link.sh")
    (bundle / "link.sh").symlink_to("run.sh")
    [tool] = load_bundles(tmp_path).tools
    assert tool.bound["entry"] == str((bundle / "run.sh").resolve())


def test_an_entry_without_any_execute_bit_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "plain", executable=False)
    (bundle / "run.sh").chmod(0o444)
    assert "not executable (chmod +x it)" in load_bundles(tmp_path).refused[0].error


@pytest.mark.parametrize(
    ("manifest", "error"),
    [
        ({"name": "bad name"}, "bad tool name"),
        ({"name": "x" * 65}, "bad tool name"),
        ({"schema": {"type": "string"}}, "schema: expected an object schema"),
        ({"schema": {"type": "object", "properties": 5}}, "schema: invalid JSON Schema"),
        ({"command": '{entry} "unclosed'}, "command: No closing quotation"),
        ({"command": ""}, "command: empty"),
        ({"retry": {"max_attempts": 0}}, "retry: max_attempts"),
        ({"toggle": "search"}, "unknown field `toggle`"),
        ({"entry": 5}, "Expected `str`"),
    ],
)
def test_a_broken_manifest_refuses_its_bundle(tmp_path: Path, manifest: dict[str, Any], error: str) -> None:
    _bundle(tmp_path, "broken", **manifest)
    _bundle(tmp_path, "good")
    found = load_bundles(tmp_path)
    assert [tool.name for tool in found.tools] == ["good"]
    assert error in found.refused[0].error


def test_unparsable_json_refuses_its_bundle(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "broken")
    (bundle / "plugin.json").write_text("{", encoding="utf-8")
    assert load_bundles(tmp_path).refused[0].error.startswith("plugin.json: ")


def test_a_directory_without_a_manifest_is_not_a_bundle_and_disabled_is_not_loaded(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "loose.txt").write_text("x", encoding="utf-8")
    _bundle(tmp_path, "off", enabled=False)
    _bundle(tmp_path, "on", enabled=True)
    found = load_bundles(tmp_path)
    assert ([tool.name for tool in found.tools], found.refused, found.disabled) == (["on"], [], [str(tmp_path / "off")])


def test_two_bundles_with_one_name_keep_the_first(tmp_path: Path) -> None:
    _bundle(tmp_path, "a", name="same")
    _bundle(tmp_path, "b", name="same")
    found = load_bundles(tmp_path)
    assert [tool.source for tool in found.tools] == [str(tmp_path / "a")]
    assert "already taken" in found.refused[0].error


TOML = '[tools.grep]\ndescription = "from the file"\ncommand = ["rg", "{q}"]\n'


def test_bbridge_toml_shadows_a_bundle_of_the_same_name(tmp_path: Path) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text(TOML, encoding="utf-8")
    bundle = _bundle(tmp_path / "tools", "grep")
    _bundle(tmp_path / "tools", "other")
    catalog = load_tools(config, tmp_path / "tools")
    assert [(tool.name, tool.description) for tool in catalog.tools] == [
        ("grep", "from the file"),
        ("other", "the other tool"),
    ]
    assert catalog.shadowed == [Shadowing("grep", f"{config} [tools.grep]", str(bundle))]
    assert catalog.refused == []


def test_a_tools_dir_that_is_not_a_directory_is_unusable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        load_tools(None, tmp_path / "absent")


def test_tools_check_lists_bundles_shadowings_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text(TOML, encoding="utf-8")
    _bundle(tmp_path / "tools", "grep")
    other = _bundle(tmp_path / "tools", "other", command="{entry} --q {q}")
    args = ["tools", "check", "--config", str(config), "--tools-dir", str(tmp_path / "tools")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"other: the other tool\n  from {other}; policy ask\n" in out
    assert f'argv ["{{entry}}","--q","{{q}}"]; {{entry}} = {(other / "run.sh").resolve()}' in out
    assert f"shadowed grep: {tmp_path / 'tools' / 'grep'} (kept: {config} [tools.grep])" in out
    assert out.endswith("ok: 2 tools\n")
    _bundle(tmp_path / "tools", "bad", entry="../x")
    assert main(args) == 1
    out = capsys.readouterr().out
    assert f"refused {tmp_path / 'tools' / 'bad'}: entry '../x': expected a plain file name" in out
    assert out.endswith("1 refused; 2 tools would be offered\n")
    assert main([*args[:-1], str(tmp_path / "absent")]) == 2
