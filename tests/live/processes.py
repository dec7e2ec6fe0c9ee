"""Processes a live test started and must stop: found by their working directory under the test's folders."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Argv = list[str]


def leftovers(roots: list[Path], ours: Callable[[Argv], bool] = lambda argv: True) -> dict[int, Argv]:
    """Live processes (not this one, not zombies) whose working directory is under one of `roots`."""
    found: dict[int, Argv] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and ours(argv) and any(cwd == str(r) or cwd.startswith(f"{r}/") for r in roots):
            found[int(entry)] = argv
    return found


def no_leftovers(roots: list[Path], what: str, ours: Callable[[Argv], bool] = lambda argv: True) -> None:
    """Assert, within 10 s (the daemon's shutdown already waited for its bridges), that none is left."""
    deadline = time.monotonic() + 10
    while leftovers(roots, ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(roots, ours) == {}, what


class Watch:
    """One live test module's folders: no process a test started outlives its test, nor any the module."""

    def __init__(self, what: str, ours: Callable[[Argv], bool] = lambda argv: True) -> None:
        self.what = what  # what would be left over, e.g. "a pi or its bridge"
        self.ours = ours
        self.roots: list[Path] = []

    @contextlib.contextmanager
    def module(self) -> Iterator[None]:
        yield
        no_leftovers(self.roots, f"{self.what} outlived this module", self.ours)

    @contextlib.contextmanager
    def test(self, root: Path, by: str = "the daemon that started it") -> Iterator[None]:
        self.roots.append(root)
        yield
        no_leftovers([root], f"{self.what} outlived {by}", self.ours)
