"""Provider handles numbered by first appearance (bbridge/replay/handles.py): which fields, in which cells, and the
commands that number them (`bbridge golden`, `parity recordings`, `parity bridge` and its `--update`). The recipe
run end to end on bridges that mint their handles is tests/test_ci_recipe.py; the reference's goldens, compared
byte for byte, are tests/test_golden.py and tests/test_bridge_parity.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bbridge.replay import bridge_parity
from bbridge.replay.handles import number_handles, number_lines
from bbridge.replay.recording import recorded_by_bbridge

REPO = Path(__file__).resolve().parents[1]
ECHO = f"{sys.executable} -m bridges.echo"


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"}, **fields}


def completed(checkpoint: str) -> dict[str, Any]:
    return event("turn/completed", status="completed", providerCheckpointId=checkpoint)


def line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def bbridge(*args: str | Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bbridge", *map(str, args)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_handles_are_numbered_by_first_appearance_and_nothing_else_is_touched() -> None:
    raw = {"providerThreadId": "thr-A", "providerCheckpointId": "ckpt-1"}  # content: left as it is
    events = [
        event("thread/identity", providerThreadId="thr-A"),
        event("provider/unhandled", rawEvent=raw),
        completed("ckpt-1"),
        completed("thr-A"),  # a handle reused in another field keeps its number
        event("turn/started"),
        completed("ckpt-2"),
    ]
    numbered = number_handles(events)
    assert [e.get("providerCheckpointId") or e["providerThreadId"] for e in numbered] == [
        "da00000000-h1", "", "da00000000-h2", "da00000000-h1", "", "da00000000-h3",
    ]  # fmt: skip
    assert numbered[1] is events[1] and numbered[1]["rawEvent"] == raw  # the unstamped "" is not a handle
    assert list(numbered[2]) == list(events[2]) and events[2]["providerCheckpointId"] == "ckpt-1"  # a copy, in order
    assert number_handles(numbered) == numbered


def test_a_numbered_golden_keeps_its_lines_byte_for_byte() -> None:
    spaced = '{"type": "turn/completed", "providerCheckpointId": "da00000000-h1"}'  # not as bbridge encodes
    assert number_lines([spaced]) == [spaced]
    assert number_lines([line(completed("ckpt-9"))]) == [line(completed("da00000000-h1"))]


def test_only_a_cell_bbridge_recorded_has_its_handles_numbered(tmp_path: Path) -> None:
    manifests = {
        "bbridge": {"provider": "bridge", "madeBy": {"command": "bbridge run", "bridge": "b", "bbridge": "0"}},
        "reference": {"provider": "codex", "cliVersion": "codex-cli 0.149.0"},
        "broken": "{",
    }
    for name, manifest in manifests.items():
        (tmp_path / name).mkdir()
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (tmp_path / name / "manifest.json").write_text(text, encoding="utf-8")
    (tmp_path / "none").mkdir()
    assert [recorded_by_bbridge(tmp_path / n) for n in ("bbridge", "reference", "broken", "none")] == [
        True, False, False, False,
    ]  # fmt: skip


def test_the_diff_numbers_both_legs_of_a_cell_bbridge_recorded() -> None:
    golden = [line(completed("echo_aaa_1:1")), line(completed("echo_aaa_1:2"))]
    live = bridge_parity.Run([completed("echo_bbb_1:1"), completed("echo_bbb_1:2")])
    assert not bridge_parity.compare("bridge/hello", golden, live, []).ok  # the reference's way: byte for byte
    assert bridge_parity.compare("bridge/hello", golden, live, [], numbered=True).ok
    reused = bridge_parity.Run([completed("echo_bbb_1:1"), completed("echo_bbb_1:1")])  # the same checkpoint twice
    check = bridge_parity.compare("bridge/hello", golden, reused, [], numbered=True)
    assert not check.ok and '"providerCheckpointId":"da00000000-h1"}' in check.diff


@pytest.fixture(scope="module")
def echo_cell(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A turn of the echo bridge, recorded by `bbridge run --record` (its checkpoint `echo_<nonce>_1:1`)."""
    root = tmp_path_factory.mktemp("cells")
    done = bbridge("run", "--provider-cmd", ECHO, "--prompt", "hello there", "--record", root, "--cell", "hello")
    assert done.returncode == 0, done.stderr
    return root / "bridge" / "hello"


def checkpoints(path: Path) -> list[str]:
    events = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
    return [e["providerCheckpointId"] for e in events if "providerCheckpointId" in e]


def test_a_recorded_cell_is_blessed_numbered_and_checked_offline_even_against_an_older_golden(
    echo_cell: Path, tmp_path: Path
) -> None:
    assert bbridge("golden", echo_cell, "--out", tmp_path).returncode == 0
    folder = tmp_path / "bridge" / "hello"
    for name in ("raw-events.ndjson", "raw-events.coalesced.ndjson"):
        assert checkpoints(folder / name) == ["da00000000-h1"], name
    checked = bbridge("parity", "recordings", echo_cell.parents[1], "--golden", tmp_path)
    assert checked.returncode == 0 and checked.stdout.endswith(" 0 failed\n"), checked.stdout
    lane = (echo_cell / "bridge→runtime.ndjson").read_text(encoding="utf-8")
    minted = lane.split('providerCheckpointId\\":\\"', 1)[1].split("\\", 1)[0]
    for name in ("raw-events.ndjson", "raw-events.coalesced.ndjson"):  # as blessed before handles were numbered
        path = folder / name
        path.write_text(path.read_text(encoding="utf-8").replace("da00000000-h1", minted), encoding="utf-8")
    checked = bbridge("parity", "recordings", echo_cell.parents[1], "--golden", tmp_path)
    assert checked.returncode == 0 and checked.stdout.endswith(" 0 failed\n"), checked.stdout
    replayed = bbridge("parity", "bridge", "--provider-cmd", ECHO, "--golden", tmp_path, echo_cell)
    assert replayed.returncode == 0, replayed.stdout


def test_update_writes_the_replay_numbered_as_golden_blesses_it(echo_cell: Path, tmp_path: Path) -> None:
    updated = bbridge("parity", "bridge", "--provider-cmd", ECHO, "--golden", tmp_path / "u", "--update", echo_cell)
    assert updated.returncode == 0 and "UPDATED bridge/hello" in updated.stdout, updated.stdout
    assert bbridge("golden", echo_cell, "--out", tmp_path / "b").returncode == 0
    raw = Path("bridge", "hello", "raw-events.ndjson")
    assert (tmp_path / "u" / raw).read_bytes() == (tmp_path / "b" / raw).read_bytes()
    assert checkpoints(tmp_path / "u" / raw) == ["da00000000-h1"]
