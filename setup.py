"""Builds the mypyc-compiled core (bbridge/core/native.py says which modules and how it is chosen).

Everything else about the package is in pyproject.toml. Without a C compiler, without mypyc, with
BBRIDGE_PURE=1 in the build's environment, or when compiling fails, the build prints one line and
installs the pure-Python core instead: it never fails for the core's sake.

A build keeps its compiled core in a cache outside the clone, as ccache would, keyed by everything its bytes
depend on (`_cache_key`: every bbridge/core source, setup.py, pyproject.toml, the versions of mypy, msgspec and
setuptools, the interpreter, the C compiler and the build's flags): another clone or worktree of the same sources
on the machine copies it from there instead of running mypyc and the C compiler again (~10 s of one CPU).
`BBRIDGE_CORE_CACHE` names its directory (default `$XDG_CACHE_HOME/bbridge/core`, else `~/.cache/bbridge/core`);
set empty or to `0`, there is no cache. It keeps the last `CACHE_KEEP` builds used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
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


CACHE_KEEP = 8


def _cache_root() -> Path | None:
    setting = os.environ.get("BBRIDGE_CORE_CACHE")
    if setting is not None:
        return Path(setting) if setting not in ("", "0") else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bbridge" / "core"


def _cache_key(compiler: str) -> str:
    """SHA-256 of what the compiled core is made from and with, so that two builds with one key are the same."""
    digest = hashlib.sha256()
    for path in [*sorted(CORE.glob("*.py")), ROOT / "setup.py", ROOT / "pyproject.toml"]:
        digest.update(f"{path.relative_to(ROOT)}\0".encode() + path.read_bytes() + b"\0")
    tools = {name: importlib.metadata.version(name) for name in ("mypy", "msgspec", "setuptools")}
    try:
        compiler_version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        compiler_version = ""
    build = {name: os.environ.get(name) for name in ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED")}
    config = {name: sysconfig.get_config_var(name) for name in ("CC", "CFLAGS", "LDSHARED", "EXT_SUFFIX")}
    interpreter = (sys.version, sys.base_prefix, platform.machine())
    digest.update(repr((tools, compiler, compiler_version, build, config, interpreter)).encode())
    return digest.hexdigest()


def _cached(entry: Path, names: list[str]) -> bool:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return all((entry / f"{name.rpartition('.')[2]}{suffix}").is_file() for name in names)


def _prune(root: Path) -> None:
    """Keeps the `CACHE_KEEP` entries used last, and drops what an interrupted store left over an hour ago."""
    entries = sorted((p for p in root.iterdir() if len(p.name) == 64), key=lambda p: p.stat().st_mtime, reverse=True)
    leftovers = [p for p in root.iterdir() if len(p.name) != 64 and p.stat().st_mtime < time.time() - 3600]
    for stale in entries[CACHE_KEEP:] + leftovers:
        shutil.rmtree(stale, ignore_errors=True)


class BuildCore(build_ext):
    """build_ext that never fails for the compiled core, and records the digest of what it compiled.

    mypyc runs here, when the extensions are actually built, not each time setuptools reads setup.py, nor for
    the commands that only write the package's metadata (`METADATA_ONLY`). A build whose key the cache holds
    copies the extension modules from there (`cached`); one that compiled stores them there (`cache_entry`).
    """

    digest = ""
    cache_entry: Path | None = None
    cached = False

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
        if not self.cached:
            self._store()

    def build_extension(self, ext: Any) -> None:
        if not self.cached or self.cache_entry is None:
            super().build_extension(ext)
            return
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.cache_entry / target.name, target)

    def _store(self) -> None:
        entry = self.cache_entry
        if entry is None or not self.extensions:
            return
        staging = None
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"{entry.name[:12]}.", dir=entry.parent))
            for ext in self.extensions:
                built = Path(self.build_lib) / self.get_ext_filename(self.get_ext_fullname(ext.name))
                shutil.copyfile(built, staging / built.name)
            if entry.exists() and not _cached(entry, [ext.name for ext in self.extensions]):
                shutil.rmtree(entry)  # an entry missing a file (removed by hand) is never used: replace it
            staging.rename(entry)  # whole or not at all; an entry another build stored first stays
            _prune(entry.parent)
        except OSError:
            pass  # the cache is only a cache
        finally:
            if staging is not None and staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

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
    compiler = _compiler()
    if compiler is None:
        _notice("no C compiler found")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _notice("mypyc is not installed")
        return []
    names = [f"{native.PACKAGE}.{name}" for name in (native.SHARED_LIB, *native.COMPILED)]
    root = _cache_root()
    if root is not None:
        try:
            entry = root / _cache_key(compiler)
            BuildCore.cache_entry = entry
            if _cached(entry, names):
                os.utime(entry)
                print(f"bbridge: the compiled core from the cache ({entry})", file=sys.stderr, flush=True)
                BuildCore.cached = True
                BuildCore.digest = native.sources_digest(CORE)
                return [Extension(name, sources=[]) for name in names]
        except (OSError, importlib.metadata.PackageNotFoundError):
            BuildCore.cache_entry = None
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
