"""The documentation (README.md, docs/, and the root documents the site includes), checked as a reader would trip:
the MkDocs site builds with `--strict` (and a broken link, a missing anchor or a page left out of the nav fails it);
every command synopsis of docs/commands.md names exactly the options `bbridge COMMAND --help` has; every TOML
example passes `bbridge config check` and `bbridge tools check`, and the plugin bundle and JSON examples load; the
token recipe makes a token. The examples that run whole are run by their topic's tests: test_embedding.py (the
clients), test_author.py (the minimal bridge), test_ci_recipe.py (docs/ci/), test_toolhost_mcp.py (an MCP server)."""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import stat
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bbridge.cli import _parser, main
from bbridge.ops import read_token
from tests.conftest import REPO

DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
READ = [REPO / "README.md", *PAGES]
NO_MKDOCS = "mkdocs is not installed: it comes with the dev extras (pip install -e '.[dev]')"


def blocks(language: str, *pages: Path) -> Iterator[tuple[str, str]]:
    """Each fenced block of `language` in the pages: (page name and block number, text)."""
    for page in pages:
        found = re.findall(rf"^```{language}\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
        for number, text in enumerate(found, 1):
            yield f"{page.name}#{number}", text


# -- the site ----------------------------------------------------------------------------------------------------


def build_site(site: Path, docs: Path | None = None) -> None:
    pytest.importorskip("mkdocs", reason=NO_MKDOCS)
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    overrides = {"site_dir": str(site)} | ({"docs_dir": str(docs)} if docs is not None else {})
    build(load_config(config_file=str(REPO / "mkdocs.yml"), strict=True, **overrides))


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    build_site(tmp_path / "site")
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Writing a bridge" in home and 'href="writing-a-bridge/"' in home  # the README, its links made the site's
    assert (tmp_path / "site" / "BENCHMARKS" / "index.html").exists()


def test_a_broken_link_a_missing_anchor_or_a_page_out_of_the_nav_fails_the_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("mkdocs", reason=NO_MKDOCS)
    from mkdocs.exceptions import Abort

    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    with (docs / "page.md").open("a", encoding="utf-8") as page:
        page.write("\n[a page](no-such-page.md), [a file](../no-such-file.md), [an anchor](api.md#no-such-heading)\n")
    (docs / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="mkdocs"), pytest.raises(Abort, match="4 warnings in strict mode"):
        build_site(tmp_path / "site", docs)
    said = caplog.text
    assert "'no-such-page.md', but the target is not found" in said
    assert "'../no-such-file.md', but the target is not found" in said
    assert "does not contain an anchor '#no-such-heading'" in said
    assert "orphan.md" in said


# -- the commands --------------------------------------------------------------------------------------------------


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], set[str]]]:
    """Every command as its words after `bbridge`, with its long options (`--help` aside)."""
    commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not commands:
        yield path, {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
        return
    for name, command in commands[0].choices.items():
        yield from leaves(command, (*path, name))


def synopses() -> dict[tuple[str, ...], set[str]]:
    """docs/commands.md's synopses: each command's words and the long options its lines name."""
    documented: dict[tuple[str, ...], set[str]] = {}
    for _, block in blocks("text", DOCS / "commands.md"):
        for line in re.sub(r"\n\s+(?=[\[-])", " ", block).splitlines():  # a synopsis continued on indented lines
            words = line.split()
            assert words[0] == "bbridge", line
            path: list[str] = []
            for word in words[1:3]:  # `bbridge serve ...`, `bbridge config check ...`
                if not re.fullmatch(r"[a-z][a-z-]*", word):
                    break
                path.append(word)
            documented.setdefault(tuple(path), set()).update(re.findall(r"--[a-z][a-z0-9-]*", line))
    return documented


def test_every_command_synopsis_names_exactly_the_options_of_its_help() -> None:
    commands = dict(leaves(_parser()))
    documented = synopses()
    assert sorted(documented) == sorted(commands), "docs/commands.md: one synopsis for each command, and only those"
    for path, options in commands.items():
        assert documented[path] == options, f"bbridge {' '.join(path)}: documented {sorted(documented[path])}"


@pytest.mark.parametrize("path", sorted(dict(leaves(_parser()))), ids=" ".join)
def test_every_command_has_its_help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: bbridge {' '.join(path)}")


# -- the examples --------------------------------------------------------------------------------------------------

TOML = list(blocks("toml", *READ))


def test_the_toml_examples_are_found() -> None:
    assert {name.split("#")[0] for name, _ in TOML} >= {"configuration.md", "providers.md", "tools.md"}


@pytest.mark.parametrize(("name", "text"), TOML, ids=[name for name, _ in TOML])
def test_each_toml_example_passes_config_check_and_tools_check(
    name: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text(text, encoding="utf-8")
    tables = tomllib.loads(text)
    for root in tables.get("skills", {}).get("roots", {}).values():  # a skill root must be a directory
        (tmp_path / root["path"]).mkdir(parents=True, exist_ok=True)
    assert main(["config", "check", "--config", str(config)]) == 0
    said = capsys.readouterr().out
    assert said.startswith("ok: "), said
    if "mcp_servers" not in tables:  # a server's example starts it: tests/test_toolhost_mcp.py loads that one
        assert main(["tools", "check", "--config", str(config)]) == 0
        assert capsys.readouterr().out.splitlines()[-1].startswith("ok: ")


def test_the_whole_configuration_says_what_the_page_says_it_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    whole = page.split("\n## A whole configuration\n", 1)[1]
    config = tmp_path / "bbridge.toml"
    config.write_text(whole.split("```toml\n", 1)[1].split("```", 1)[0], encoding="utf-8")
    assert main(["config", "check", "--config", str(config)]) == 0
    assert main(["tools", "check", "--config", str(config)]) == 0
    first, *_, last = capsys.readouterr().out.splitlines()
    assert f"`{first}`" in whole and f"`{last}`" in whole


def test_the_plugin_bundle_example_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [(_, text)] = [block for block in blocks("json", DOCS / "tools.md")]
    bundle = tmp_path / "tools" / "websearch"
    bundle.mkdir(parents=True)
    (bundle / "plugin.json").write_text(text, encoding="utf-8")
    entry = bundle / json.loads(text)["entry"]
    entry.write_text("#!/bin/sh\necho results\n", encoding="utf-8")
    entry.chmod(0o755)
    config = tmp_path / "bbridge.toml"
    config.write_text("", encoding="utf-8")
    assert main(["tools", "check", "--config", str(config), "--tools-dir", str(tmp_path / "tools")]) == 0
    said = capsys.readouterr().out
    assert said.startswith("websearch: Query a search API") and said.endswith("ok: 1 tools\n"), said


def test_every_json_example_is_json() -> None:
    examples = list(blocks("json", *READ))
    assert len(examples) >= 3
    for name, text in examples:
        assert isinstance(json.loads(text), dict), name


def test_the_token_recipe_makes_a_private_token(tmp_path: Path) -> None:
    [recipe] = re.findall(r"`(\(umask 077; .*?\))`", (DOCS / "operating.md").read_text(encoding="utf-8"))
    subprocess.run(["sh", "-c", recipe], cwd=tmp_path, check=True, timeout=30)
    token = tmp_path / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(read_token(token) or "") == 44  # 32 random bytes, base64
