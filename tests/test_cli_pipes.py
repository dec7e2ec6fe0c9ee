"""The operator's command line around the daemon (issue 31): `serve --log-format`, a token file `serve` makes, and
commands piped into a reader that stops early (`| head`) ending quietly."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from bbridge.cli import BROKEN_PIPE
from bbridge.daemon.config import echo_provider
from tests.support import connect, running
from tests.test_ops import BBRIDGE, bbridge, turn


async def closed_reader(*args: str) -> tuple[int, str]:
    """A bbridge command whose stdout's reader has already gone: its exit status and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        with trio.fail_after(60):
            result = await trio.run_process([*BBRIDGE, *args], stdout=write, capture_stderr=True, check=False)
    finally:
        os.close(write)
    return result.returncode, result.stderr.decode()


def quiet(stderr: str) -> bool:
    return "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr


async def test_commands_piped_into_a_reader_that_stops_end_quietly(tmp_path: Path) -> None:
    async with running(tmp_path, {"echo": echo_provider()}) as (daemon, path), connect(path) as client:
        await turn(client, "thr_p", "slow:1 " + " ".join(f"word{n}" for n in range(50)))
        socket = str(path)
        for args in (
            ("status", "--socket", socket),
            ("status", "--socket", socket, "--json"),
            ("tail", "--socket", socket, "--after-seq", "0"),
            ("tail", "--socket", socket, "--thread", "thr_p", "--json"),
            ("pending", "--socket", socket),
            ("run", "--provider-cmd", f"{sys.executable} -m bridges.echo", "--prompt", "hi"),
        ):
            status, stderr = await closed_reader(*args)
            assert (status, stderr) == (BROKEN_PIPE, ""), args


def serve_once(*args: str) -> str:
    """`bbridge serve` on stdio with nothing to read: the logs it writes on its way up and down."""
    result = subprocess.run(
        [*BBRIDGE, "serve", "--config", os.devnull, "--log-level", "info", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_serve_log_format_console_or_json() -> None:
    as_json = serve_once()  # stderr is a pipe here: json by default
    assert as_json and all(json.loads(line)["event"] for line in as_json.splitlines())
    console = serve_once("--log-format", "console")
    assert console and not any(line.startswith("{") for line in console.splitlines())
    assert " [info     ] client connected" in console
    assert serve_once("--log-format", "json").count("\n") == as_json.count("\n")


async def test_serve_makes_a_missing_token_file_and_clients_use_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    sock = tmp_path / "d.sock"
    command = [*BBRIDGE, "serve", "--socket", str(sock), "--config", os.devnull, "--token-file", str(token_file)]
    proc = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    seen = b""
    try:
        with trio.fail_after(30):
            while b'"listening"' not in seen:
                seen += await proc.stderr.receive_some()
        token = token_file.read_text().strip()
        assert len(token) >= 40
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        [made] = [json.loads(line) for line in seen.decode().splitlines() if "token" in line]
        assert made["path"] == str(token_file) and token not in seen.decode()
        assert (await bbridge("status", "--socket", str(sock), "--token-file", str(token_file))).returncode == 0
        refused = await bbridge("status", "--socket", str(sock))
        assert refused.returncode == 1
    finally:
        proc.terminate()
        with trio.fail_after(20):
            await proc.wait()
    # the same file again: read, not replaced
    proc = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE)
    try:
        with trio.fail_after(30):
            while not sock.exists():
                await trio.sleep(0.05)
        assert token_file.read_text().strip() == token
    finally:
        proc.terminate()
        with trio.fail_after(20):
            await proc.wait()


@pytest.mark.parametrize("content", ["", "\n"])
def test_serve_refuses_an_empty_token_file(tmp_path: Path, content: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(content)
    result = subprocess.run(
        [*BBRIDGE, "serve", "--config", os.devnull, "--token-file", str(token_file)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"bbridge: the token file {token_file} is empty (delete it and serve makes one)"
    )
