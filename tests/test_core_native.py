"""The compiled core and the pure core are the same core: byte parity on every shared corpus, both ways.

`make install` compiles bbridge/core with mypyc (setup.py); `BBRIDGE_PURE=1` makes an import use the `.py`
modules even when the extension modules are present (bbridge/core/native.py). Each core runs in its own
interpreter here, so this process's choice does not matter.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bbridge.core import native
from tests.conftest import REPO, require_shared

PARITY_TIMEOUT_S = 300


def env_for(core: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "BBRIDGE_PURE"}
    if core == "pure":
        env["BBRIDGE_PURE"] = "1"
    return env


def python(core: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env_for(core), cwd=REPO, capture_output=True, text=True, timeout=PARITY_TIMEOUT_S
    )


def version(core: str) -> str:
    done = python(core, "-m", "bbridge", "--version")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_version_names_the_core_and_bbridge_pure_forces_the_sources() -> None:
    assert version("pure").endswith("(core: pure (BBRIDGE_PURE is set))")
    probe = "import bbridge.core.assembler as a, bbridge.core.guard as g; print(a.__file__, g.__file__)"
    files = python("pure", "-c", probe).stdout.split()
    assert [Path(f).name for f in files] == ["assembler.py", "guard.py"]
    if native.CORE == "compiled":
        assert native.describe() == "compiled (mypyc)"
        assert all(not f.endswith(".py") for f in python("compiled", "-c", probe).stdout.split())


def test_the_compiled_core_runs_only_when_built_from_the_sources_on_disk(tmp_path: Path) -> None:
    for name in native.COMPILED:
        (tmp_path / f"{name}.py").write_text(f"# {name}\n")
    assert native.choose(tmp_path, {}) == ("pure", "not built")
    (tmp_path / native.DIGEST_FILE).write_text(native.sources_digest(tmp_path) + "\n")
    assert native.choose(tmp_path, {}) == ("pure", "not built for this interpreter")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in (*native.COMPILED, native.SHARED_LIB):
        (tmp_path / f"{name}{suffix}").write_bytes(b"")
    assert native.choose(tmp_path, {}) == ("compiled", "mypyc")
    assert native.choose(tmp_path, {"BBRIDGE_PURE": "1"}) == ("pure", "BBRIDGE_PURE is set")
    assert native.choose(tmp_path, {"BBRIDGE_PURE": "0"}) == ("compiled", "mypyc")
    (tmp_path / "assembler.py").write_text("# edited after the build\n")
    assert native.choose(tmp_path, {}) == ("pure", "compiled from other sources: run make install")


def test_compiled_and_pure_cores_pass_every_parity_corpus_byte_for_byte() -> None:
    recordings, golden = require_shared("recordings"), require_shared("golden")
    cases = require_shared("golden", "synthetic", "cases.ndjson")
    compiled_version = version("compiled")
    if "core: compiled" not in compiled_version:
        pytest.skip(f"the compiled core is not built here ({compiled_version}); `make install` builds it")
    runs = {
        (core, corpus): subprocess.Popen(
            [sys.executable, "-m", "bbridge", "parity", *args],
            env=env_for(core),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for core in ("compiled", "pure")
        for corpus, args in (
            ("recordings", ["recordings", str(recordings), "--golden", str(golden)]),
            ("cases", ["cases", str(cases)]),
        )
    }
    outputs = {}
    for key, proc in runs.items():
        out, err = proc.communicate(timeout=PARITY_TIMEOUT_S)
        assert proc.returncode == 0, (key, out[-2000:], err[-2000:])
        last = out.strip().splitlines()[-1]
        assert last.endswith(" passed, 0 failed") and not last.startswith("0 passed"), (key, last)
        outputs[key] = out
    for corpus in ("recordings", "cases"):
        assert outputs["compiled", corpus] == outputs["pure", corpus]


# The daemon's delivery path (core/event_log.py) over the bench stream, plus an event the guard drops: a digest of
# every line it frames and of what it collects for the daemon.
DELIVERY_DIGEST = """
import hashlib
import msgspec
from bbridge.bench import stream
from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.guard import Guard
from bbridge.core.event_log import Delivery, EventLog
delivery = Delivery(
    "bench", Assembler("bench", "parity"), Guard(), EventLog(100), {}, frozenset({"turn/started"}), None, frozenset()
)
digest = hashlib.sha256()
for n, line in enumerate(stream.interleaved_lines("d", 4, 40)):
    params = grammar.decode_params(msgspec.json.encode(msgspec.json.decode(line)["params"]))
    digest.update(delivery.take(params.threadId, params.deltas, n * 7.0) or b"-")
orphan = {"type": "item/agentMessage/delta", "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"}}
digest.update(delivery.deliver("bench-0", [{**orphan, "itemId": "item_x", "delta": "x"}]) or b"-")
print(digest.hexdigest(), len(delivery.noticed), [(t, v.rule) for t, _, v in delivery.dropped])
"""


def test_compiled_and_pure_delivery_frame_the_same_lines() -> None:
    compiled_version = version("compiled")
    if "core: compiled" not in compiled_version:
        pytest.skip(f"the compiled core is not built here ({compiled_version}); `make install` builds it")
    outputs = {core: python(core, "-c", DELIVERY_DIGEST) for core in ("compiled", "pure")}
    for done in outputs.values():
        assert done.returncode == 0, done.stderr
    assert outputs["compiled"].stdout == outputs["pure"].stdout
    assert outputs["pure"].stdout.split()[1:3] == ["40", "[('bench-0',"]  # 40 turns noticed, the orphan dropped
