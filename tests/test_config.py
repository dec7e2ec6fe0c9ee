"""`bbridge.toml` (issue 10): a broken provider entry is refused and named, the rest still serve; an unreadable
file is fatal; `daemon/status`, `bbridge config check` and `serve --strict-config` report the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from bbridge.config_file import ConfigError
from bbridge.daemon.config import (
    ConfigReport,
    ProviderConfig,
    Refusal,
    config_path,
    echo_provider,
    load_config,
)
from bbridge.daemon.runtime import Daemon
from tests.conftest import REPO

GOOD = '[providers.good]\ncommand = ["good-bridge", "--stdio"]\nturn_stall_timeout_s = 30\n'
BROKEN = '[providers.my-agent]\ncommand = ["my-bridge"]\nturn_stall_timeout_s = "slow"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bbridge.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- loading -------------------------------------------------------------------------


def test_a_broken_provider_is_refused_and_the_good_one_and_echo_serve(tmp_path: Path) -> None:
    path = write(tmp_path, BROKEN + GOOD)
    providers, report = load_config(path)
    assert sorted(providers) == ["echo", "good"]
    assert providers["good"] == ProviderConfig(command=["good-bridge", "--stdio"], turn_stall_timeout_s=30.0)
    assert report == ConfigReport(
        str(path.absolute()), [Refusal("providers.my-agent", "turn_stall_timeout_s", "expected a number, got a string")]
    )
    assert report.refused[0].line() == "providers.my-agent.turn_stall_timeout_s: expected a number, got a string"


@pytest.mark.parametrize(
    ("body", "key", "error"),
    [
        ('command = ["b"]\ncolour = "blue"', "colour", "unknown key (known: command, cwd,"),
        ('cwd = "/"', "command", "missing (required)"),
        ("command = []", "command", "expected a non-empty array of non-empty strings"),
        ('command = ["b", ""]', "command", "expected a non-empty array of non-empty strings"),
        ('command = "b --stdio"', "command", "expected an array, got a string"),
        ('command = ["b", 1]', "command", "expected a string, got an integer at [1]"),
        ('command = ["b"]\ncwd = 3', "cwd", "expected a string, got an integer"),
        ('command = ["b"]\nenv = { A = "1", B = 2 }', "env", "expected a string, got an integer at B"),
        ('command = ["b"]\nenv_passthrough = "KEY"', "env_passthrough", "expected an array, got a string"),
        ('command = ["b"]\nturn_start_timeout_s = -1', "turn_start_timeout_s", "positive, finite number of seconds"),
        ('command = ["b"]\nturn_start_sweep_s = 0', "turn_start_sweep_s", "positive, finite number of seconds"),
        ('command = ["b"]\nstop_grace_s = 0', "stop_grace_s", "positive, finite number of seconds"),
        ('command = ["b"]\nturn_stall_timeout_s = nan', "turn_stall_timeout_s", "finite number of seconds, got nan"),
        ('command = ["b"]\nturn_stall_timeout_s = inf', "turn_stall_timeout_s", "finite number of seconds, got inf"),
        ('command = ["b"]\nturn_stall_timeout_s = true', "turn_stall_timeout_s", "expected a number, got a boolean"),
        (
            'command = ["b"]\nextension_kinds = { "a/card" = { item = 3 } }',
            "extension_kinds",
            'expected a table, got an integer at "a/card".item',
        ),
        (
            'command = ["b"]\nextension_kinds = { "a/card" = { itm = {} } }',
            "extension_kinds",
            "unknown key 'itm' at \"a/card\"",
        ),
        (
            'command = ["b"]\nextension_kinds = { "a/card" = { item = { type = "nope" } } }',
            "extension_kinds",
            'invalid JSON Schema at "a/card".item:',
        ),
        (
            'command = ["b"]\nextension_kinds = { "a/card" = { state = { "$schema" = 3 } } }',
            "extension_kinds",
            'invalid JSON Schema at "a/card".state: $schema is not a string',
        ),
    ],
)
def test_each_kind_of_broken_entry_is_refused_by_section_and_key(
    tmp_path: Path, body: str, key: str, error: str
) -> None:
    providers, report = load_config(write(tmp_path, f"[providers.bad]\n{body}\n" + GOOD))
    assert sorted(providers) == ["echo", "good"]
    [refusal] = report.refused
    assert (refusal.section, refusal.key) == ("providers.bad", key)
    assert error in refusal.error, refusal.error


def test_a_schema_too_deep_for_jsonschema_refuses_its_provider(tmp_path: Path) -> None:
    """TOML this deep still parses; checking it as a JSON Schema recurses past the limit."""
    schema = "{ items = " * 200 + "{}" + " }" * 200
    text = f'[providers.deep]\ncommand = ["b"]\nextension_kinds = {{ "a/b" = {{ item = {schema} }} }}\n'
    providers, report = load_config(write(tmp_path, text + GOOD))
    assert sorted(providers) == ["echo", "good"]
    assert report.refused == [
        Refusal("providers.deep", "extension_kinds", 'JSON Schema nested too deeply at "a/b".item')
    ]


def test_every_bad_key_of_a_section_is_named(tmp_path: Path) -> None:
    _, report = load_config(write(tmp_path, "[providers.bad]\ncwd = 1\nturn_start_sweep_s = -2\nx = 1\n"))
    assert [(r.section, r.key) for r in report.refused] == [
        ("providers.bad", "command"),
        ("providers.bad", "cwd"),
        ("providers.bad", "turn_start_sweep_s"),
        ("providers.bad", "x"),
    ]


def test_a_section_that_is_not_a_table_is_refused_whole(tmp_path: Path) -> None:
    providers, report = load_config(write(tmp_path, "[providers]\nscalar = 3\n" + GOOD))
    assert sorted(providers) == ["echo", "good"]
    assert report.refused == [Refusal("providers.scalar", None, "expected a table, got an integer")]
    assert report.refused[0].line() == "providers.scalar: expected a table, got an integer"


def test_a_broken_echo_override_leaves_the_built_in_echo(tmp_path: Path) -> None:
    providers, report = load_config(write(tmp_path, '[providers.echo]\ncommand = "echo"\n'))
    assert providers == {"echo": echo_provider()}
    assert [(r.section, r.key) for r in report.refused] == [("providers.echo", "command")]


def test_an_unknown_top_level_section_is_refused(tmp_path: Path) -> None:
    """A typo such as `[provider.x]` would otherwise configure nothing, silently."""
    providers, report = load_config(write(tmp_path, '[provider.typo]\ncommand = ["b"]\n' + GOOD))
    assert sorted(providers) == ["echo", "good"]
    assert report.refused == [Refusal("provider", None, "unknown section (providers go in [providers.NAME])")]


def test_no_file_is_echo_alone_and_nothing_refused() -> None:
    assert load_config(None) == ({"echo": echo_provider()}, ConfigReport(None, []))


def test_the_default_file_is_bbridge_toml_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert config_path(None) is None
    write(tmp_path, GOOD)
    assert config_path(None) == Path("bbridge.toml")
    assert config_path(Path("other.toml")) == Path("other.toml")


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "No such file"),
        (b"[providers.x\ncommand = 1\n", "Expected ']'"),
        (b"providers = 3\n", "providers: expected a table, got an integer"),
        (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply to parse"),
        (b'[providers.x]\ncommand = ["\xff"]\n', "can't decode"),
    ],
    ids=["missing", "invalid-toml", "providers-not-a-table", "too-deep", "not-utf8"],
)
def test_an_unusable_file_is_fatal(tmp_path: Path, content: bytes | None, error: str) -> None:
    path = tmp_path / "bbridge.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=str(path)) as raised:
        load_config(path)
    assert error in str(raised.value)


def test_provider_config_built_in_code_obeys_the_same_rules() -> None:
    with pytest.raises(ValueError, match="turn_stall_timeout_s: expected a positive, finite number"):
        ProviderConfig(command=["b"], turn_stall_timeout_s=float("nan"))
    with pytest.raises(ValueError, match="command: expected a non-empty array"):
        ProviderConfig(command=[])


# -- daemon/status ---------------------------------------------------------------------


async def test_daemon_status_reports_the_refusals(tmp_path: Path) -> None:
    path = write(tmp_path, BROKEN + GOOD)
    providers, report = load_config(path)
    status = Daemon(providers, config=report).status()
    assert status["config"] == {
        "path": str(path.absolute()),
        "refused": [
            {"section": "providers.my-agent", "key": "turn_stall_timeout_s", "error": "expected a number, got a string"}
        ],
    }
    assert [p["providerId"] for p in status["providers"]] == ["echo", "good"]


async def test_daemon_status_without_a_config_file() -> None:
    assert Daemon({"echo": echo_provider()}).status()["config"] == {"path": None, "refused": []}


# -- the command line --------------------------------------------------------------------


def bbridge(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "bbridge", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_config_check_ok(tmp_path: Path) -> None:
    result = bbridge("config", "check", "--config", str(write(tmp_path, GOOD)), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "ok: 2 providers (echo, good)\n")


def test_config_check_reads_bbridge_toml_in_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path, BROKEN)
    result = bbridge("config", "check", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "refused providers.my-agent.turn_stall_timeout_s: expected a number, got a string",
        "1 refused; 1 providers would serve (echo)",
    ]


@pytest.mark.parametrize("content", [None, "[providers.x\n"], ids=["missing", "invalid-toml"])
def test_config_check_unusable_file_exits_2(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "bbridge.toml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    result = bbridge("config", "check", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"bbridge: {path}: ")


def test_serve_strict_config_refuses_to_start(tmp_path: Path) -> None:
    path = write(tmp_path, BROKEN + GOOD)
    result = bbridge("serve", "--strict-config", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert "providers.my-agent.turn_stall_timeout_s: expected a number, got a string" in result.stderr


def serve_status(*args: str, cwd: Path) -> tuple[dict[str, Any], str]:
    """`bbridge serve ARGS` on stdio: its `daemon/status` answer, then its stderr once stdin's end has stopped it.

    Stdin stays open until the answer is read: requests still in flight when a stdio client goes away are dropped.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "bbridge", "serve", *args]
    with subprocess.Popen(
        command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as daemon:
        watchdog = threading.Timer(60, daemon.kill)
        watchdog.start()
        try:
            assert daemon.stdin is not None and daemon.stdout is not None and daemon.stderr is not None
            daemon.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "daemon/status"}) + "\n")
            daemon.stdin.flush()
            answer = json.loads(daemon.stdout.readline())
            daemon.stdin.close()
            stderr = daemon.stderr.read()
            assert daemon.wait() == 0, stderr
        finally:
            watchdog.cancel()
    assert answer["id"] == 1, answer
    result: dict[str, Any] = answer["result"]
    return result, stderr


def test_serve_starts_with_a_broken_entry_warns_and_reports_it(tmp_path: Path) -> None:
    path = write(tmp_path, BROKEN + GOOD)
    status, stderr = serve_status("--config", str(path), cwd=tmp_path)
    assert status["config"]["refused"] == [
        {"section": "providers.my-agent", "key": "turn_stall_timeout_s", "error": "expected a number, got a string"}
    ]
    assert [p["providerId"] for p in status["providers"]] == ["echo", "good"]
    warnings = [json.loads(line) for line in stderr.splitlines() if "config entry refused" in line]
    assert [(w["level"], w["section"], w["key"]) for w in warnings] == [
        ("warning", "providers.my-agent", "turn_stall_timeout_s")
    ]


def test_serve_strict_config_starts_when_nothing_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    status, _ = serve_status("--strict-config", "--config", str(path), cwd=tmp_path)
    assert status["config"] == {"path": str(path.absolute()), "refused": []}
