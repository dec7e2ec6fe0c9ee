"""docs/embedding.md ("Embedding bbridge"): its Python and TypeScript examples, taken from the page as written, run
against a live daemon on a socket with a token (the TypeScript one, committed as
`clients/typescript/examples/readme.ts`, compiled with `tsc --strict` first); neither gives a `clientRequestId` (the
clients mint it). And every file of the TypeScript package the page and the package's README name exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.test_typescript_client import PACKAGE, build, daemon, exported_openrpc, tools

__all__ = ["daemon", "tools"]  # the fixtures, shared with the TypeScript client's tests

EXPECTED = "echo: approve:command hello [completed]\n"


EMBEDDING = REPO / "docs" / "embedding.md"


def readme_example(language: str) -> str:
    (code,) = re.findall(rf"```{language}\n(.*?)```", EMBEDDING.read_text(encoding="utf-8"), re.S)
    return code


def test_the_python_example(tmp_path: Path, daemon: tuple[Path, Path]) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example("python"))
    socket, token = daemon
    ran = subprocess.run([sys.executable, str(script), str(socket), str(token)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, EXPECTED), ran.stderr


def test_the_typescript_example(tools: None, tmp_path: Path, daemon: tuple[Path, Path]) -> None:
    assert (PACKAGE / "examples" / "readme.ts").read_text() == readme_example("typescript"), (
        "clients/typescript/examples/readme.ts differs from docs/embedding.md's TypeScript example: make them one text"
    )
    root = tmp_path / "ts"
    openrpc = exported_openrpc(tmp_path / "schema")
    compiled = build(root, openrpc)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    socket, token = daemon
    ran = subprocess.run(["node", str(root / "dist" / "examples" / "readme.js"), str(socket), str(token)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, EXPECTED), ran.stderr


# a file of the package, as the docs name it: `clients/typescript/examples/echo.ts`, or `examples/echo.ts` (the
# TypeScript README and docs/embedding.md's TypeScript section speak from the package)
PACKAGE_PATH = re.compile(r"(?<![\w/.-])(?:clients/typescript/)?((?:examples|scripts|src)/[\w./-]*\w\.(?:ts|mjs))")
GENERATED = {"src/api.ts"}  # written by `npm run build` (and ignored by git)


def test_every_package_file_the_readmes_name_exists() -> None:
    named = set()
    for readme in (EMBEDDING, PACKAGE / "README.md"):
        named |= set(PACKAGE_PATH.findall(readme.read_text()))
    assert {"examples/echo.ts", "examples/spawn.ts", "examples/readme.ts", "src/client.ts"} <= named
    assert sorted(path for path in named - GENERATED if not (PACKAGE / path).is_file()) == []
    assert "/src/api.ts" in (PACKAGE / ".gitignore").read_text().splitlines()
