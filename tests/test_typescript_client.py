"""The TypeScript client (`clients/typescript`): declarations generated from the OpenRPC document `bbridge schema`
writes now, the client and its examples compiled with `tsc --strict` against them, and run by node against a live
daemon (a socket with a token: approval, a dropped connection, resume with `afterSeq`; and a daemon spawned on
stdio). A schema change the client does not follow fails the compile. Needs node and `make ts-client` (the npm
registry); skips with the reason when the registry cannot be reached."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import make_or_skip

PACKAGE = REPO / "clients" / "typescript"
MODULES = REPO / ".cache" / "ts" / "node_modules"


@pytest.fixture(scope="module")
def tools() -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the TypeScript client cannot be built")
    make_or_skip("ts-client", "typescript and the declaration generator")


def build(root: Path, openrpc: Path, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A copy of the package (plus `extra` files) built as a TypeScript user would: generate `src/api.ts` from
    `openrpc`, then tsc."""
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("node_modules", "dist", "api.ts"))
    for name, text in (extra or {}).items():
        (root / name).write_text(text)
    (root / "node_modules").symlink_to(MODULES)
    generated = subprocess.run(
        ["node", "scripts/generate.mjs", str(openrpc), "src/api.ts"], cwd=root, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    compiled = subprocess.run(
        [str(MODULES / ".bin" / "tsc"), "-p", ".", "--strict"], cwd=root, capture_output=True, text=True, timeout=300
    )
    if compiled.returncode == 0:
        (root / "dist" / "package.json").write_text('{"type": "module"}\n')  # the package's own module type
    return compiled


def exported_openrpc(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "bbridge", "schema", "--out", str(out)], check=True, capture_output=True)
    return out / "openrpc.json"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """`bbridge serve` on a socket with a token file; stopped at the end."""
    socket, token = tmp_path / "d.sock", tmp_path / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BB_")}
    argv = [sys.executable, "-m", "bbridge", "serve", "--socket", str(socket), "--token-file", str(token)]
    serve = subprocess.Popen([*argv, "--log-level", "warning"], env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert serve.poll() is None and time.monotonic() < deadline, "bbridge serve did not start"
            time.sleep(0.05)
        yield socket, token
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def run_node(script: Path, *args: str) -> dict[str, object]:
    ran = subprocess.run(["node", str(script), *args], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_client_compiles_strict_and_runs_against_a_live_daemon(
    tools: None, tmp_path: Path, daemon: tuple[Path, Path]
) -> None:
    root = tmp_path / "ts"
    compiled = build(root, exported_openrpc(tmp_path / "schema"))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    socket, token = daemon
    summary = run_node(root / "dist" / "examples" / "echo.js", "--socket", str(socket), "--token-file", str(token))
    assert summary["ok"] is True and summary["dropped"] is True and summary["approvals"] == ["command"], summary
    spawned = run_node(root / "dist" / "examples" / "spawn.js", sys.executable, "-m", "bbridge", "serve")
    assert spawned == {"ok": True, "providers": ["echo"], "text": "echo: hello over stdio"}


def test_a_schema_change_the_client_does_not_follow_breaks_the_build(tools: None, tmp_path: Path) -> None:
    """`thread/events` renaming `afterSeq`: the generated `Methods` change, and the client's call no longer fits."""
    document = json.loads(exported_openrpc(tmp_path / "schema").read_text())
    (method,) = [m for m in document["methods"] if m["name"] == "thread/events"]
    for param in method["params"]:
        if param["name"] == "afterSeq":
            param["name"] = "after"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(document))
    compiled = build(tmp_path / "ts", changed)
    assert compiled.returncode != 0
    assert "src/client.ts" in compiled.stdout and "afterSeq" in compiled.stdout, compiled.stdout
