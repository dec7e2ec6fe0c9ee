"""Builds the mypyc-compiled core (bbridge/core/native.py says which modules and how it is chosen).

Everything else about the package is in pyproject.toml. Without a C compiler, without mypyc, with
BBRIDGE_PURE=1 in the build's environment, or when compiling fails, the build prints one line and
installs the pure-Python core instead: it never fails for the core's sake.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CORE = ROOT / "bbridge" / "core"


def _native() -> Any:
    """bbridge/core/native.py loaded by path, without importing the package."""
    spec = importlib.util.spec_from_file_location("_bbridge_native_build", CORE / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notice(why: str) -> None:
    print(f"bbridge: pure-Python core ({why}); the compiled core was not built", file=sys.stderr, flush=True)


def _compiler() -> str | None:
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(command)
    return shutil.which(words[0]) if words else None


# Commands that only write metadata: pip runs `egg_info` (its get-requires hook) and `dist_info` (its metadata hook),
# each in a process of its own, before the build; their manifest finalizes build_ext for its sources, which ran
# mypyc for nothing in both (~2 s of CPU each). The placeholder extension keeps them correct: it has no sources.
METADATA_ONLY = frozenset({"egg_info", "dist_info", "sdist"})


class BuildCore(build_ext):
    """build_ext that never fails for the compiled core, and records the digest of what it compiled.

    mypyc runs here, when the extensions are actually built, not each time setuptools reads setup.py, nor for
    the commands that only write the package's metadata (`METADATA_ONLY`).
    """

    digest = ""

    def finalize_options(self) -> None:
        if not set(self.distribution.commands) <= METADATA_ONLY:
            self.distribution.ext_modules = _extensions()
        super().finalize_options()

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # any compiler or linker failure: install the pure core instead
            _notice(f"compiling failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            self._drop_outputs()
            return
        self._write_digest()

    def _targets(self) -> list[Path]:
        targets = [Path(self.build_lib) / "bbridge" / "core"]
        if self.inplace or getattr(self, "editable_mode", False):
            targets.append(CORE)
        return targets

    def _write_digest(self) -> None:
        if not self.extensions or not self.digest:
            return
        for target in self._targets():
            target.mkdir(parents=True, exist_ok=True)
            (target / "compiled.sha256").write_text(self.digest + "\n")

    def _drop_outputs(self) -> None:
        for target in self._targets():
            (target / "compiled.sha256").unlink(missing_ok=True)


_BUILT: list[Any] | None = None  # mypyc runs once per process, however often setuptools asks


def _extensions() -> list[Any]:
    global _BUILT
    if _BUILT is None:
        _BUILT = _compile()
    return _BUILT


def _compile() -> list[Any]:
    native = _native()
    if os.environ.get("BBRIDGE_PURE", "") not in ("", "0"):
        _notice("BBRIDGE_PURE is set")
        return []
    if _compiler() is None:
        _notice("no C compiler found")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _notice("mypyc is not installed")
        return []
    paths = [f"bbridge/core/{name}.py" for name in native.COMPILED]
    try:
        extensions = mypycify(paths, group_name="bbridge.core._native", opt_level="3")
    except BaseException as error:  # mypycify exits (SystemExit) on type errors; the pure core still works
        detail = str(error).strip().splitlines()
        _notice(f"mypyc failed: {type(error).__name__}{': ' + detail[0] if detail else ''}")
        return []
    BuildCore.digest = native.sources_digest(CORE)
    return list(extensions)


# A placeholder that marks the package as having extension modules; BuildCore replaces it with mypyc's.
setup(ext_modules=[Extension("bbridge.core._native__mypyc", sources=[])], cmdclass={"build_ext": BuildCore})
