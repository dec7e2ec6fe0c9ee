"""Which core runs: the mypyc-compiled modules or their Python sources.

`make install` (`pip install -e .`, through `setup.py`) compiles the modules in `COMPILED` with mypyc
into extension modules beside their sources and records a digest of the sources they were built from
(`compiled.sha256`). An extension module shadows its `.py` on import, so the choice is made here, when
`bbridge.core` is imported and before any of those modules is: the compiled core runs when the digest
matches the sources as they are now and every extension is present; otherwise, or when the environment
sets `BBRIDGE_PURE=1`, a finder placed first on `sys.meta_path` loads those modules from their `.py`
files. Stdlib only, and no state beyond the two names below.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

PACKAGE = "bbridge.core"
# Compiled by mypyc. Not grammar, scalars, shapes (msgspec Structs with class keywords stay interpreted), js, nesting.
COMPILED = (
    "assembler",
    "event_log",
    "events",
    "guard",
    "ids",
    "items",
    "outputs",
    "reports",
    "sink",
    "state",
    "turns",
)
SHARED_LIB = "_native__mypyc"  # mypyc's shared library for the group `bbridge.core._native`
DIGEST_FILE = "compiled.sha256"
HERE = Path(__file__).resolve().parent


def sources_digest(root: Path = HERE) -> str:
    """SHA-256 over the compiled modules' sources (name and bytes each), as the build records it."""
    digest = hashlib.sha256()
    for name in COMPILED:
        digest.update(name.encode() + b"\0")
        digest.update((root / f"{name}.py").read_bytes())
    return digest.hexdigest()


def choose(root: Path = HERE, environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """("compiled" | "pure", why) for the core in `root` (this package) under `environ`."""
    if environ.get("BBRIDGE_PURE", "") not in ("", "0"):
        return "pure", "BBRIDGE_PURE is set"
    try:
        recorded = (root / DIGEST_FILE).read_text().strip()
    except OSError:
        return "pure", "not built"
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    if not all(any((root / f"{name}{suffix}").is_file() for suffix in suffixes) for name in (*COMPILED, SHARED_LIB)):
        return "pure", "not built for this interpreter"
    if recorded != sources_digest(root):
        return "pure", "compiled from other sources: run make install"
    return "compiled", "mypyc"


class _PureFinder:
    """Loads the compiled modules' names from their `.py` sources, ahead of the extension modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, HERE / f"{name}.py")


CORE, REASON = choose()
if CORE == "pure" and not any(isinstance(finder, _PureFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _PureFinder())


def describe() -> str:
    """`compiled (mypyc)` or `pure (why)`, for `bbridge --version` and the bench JSON."""
    return f"{CORE} ({REASON})"
