"""README "Embedding bbridge": its Python and TypeScript examples, taken from the README as written, run against
a live daemon on a socket with a token (the TypeScript one compiled with `tsc --strict` first)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.test_typescript_client import build, daemon, exported_openrpc, tools

__all__ = ["daemon", "tools"]  # the fixtures, shared with the TypeScript client's tests

EXPECTED = "echo: approve:command hello [completed]\n"


def readme_example(language: str) -> str:
    section = (REPO / "README.md").read_text().split("## Embedding bbridge", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(rf"```{language}\n(.*?)```", section, re.S)
    return code


def test_the_python_example(tmp_path: Path, daemon: tuple[Path, Path]) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example("python"))
    socket, token = daemon
    ran = subprocess.run([sys.executable, str(script), str(socket), str(token)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, EXPECTED), ran.stderr


def test_the_typescript_example(tools: None, tmp_path: Path, daemon: tuple[Path, Path]) -> None:
    root = tmp_path / "ts"
    openrpc = exported_openrpc(tmp_path / "schema")
    compiled = build(root, openrpc, extra={"examples/readme.ts": readme_example("typescript")})
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    socket, token = daemon
    ran = subprocess.run(["node", str(root / "dist" / "examples" / "readme.js"), str(socket), str(token)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, EXPECTED), ran.stderr
