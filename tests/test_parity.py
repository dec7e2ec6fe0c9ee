"""Byte parity with the reference over ../shared, plus the CLI contract.

Every recording check (`check_recordings`) and every synthetic case (`run_case`)
must pass, except the entries of `tests/known_gaps.json`:

    {"recordings": {"<check name>": "<reason>"}, "cases": {"<case id>": "<reason>"}}

A failure outside that list fails the suite, and so does a listed entry that now
passes (or no longer exists), so the list can only shrink honestly. The
fresh-clone tests at the end build a tiny recording cell in tmp_path and need
nothing from ../shared.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from bbridge.replay.parity import check_recordings, read_cases, run_case

KNOWN_GAPS = Path(__file__).with_name("known_gaps.json")
REPLAY_CELL = "codex/turn-tools"  # differs between plain and coalesced output
SYNTHETIC_CASES = 1500  # pinned by golden/synthetic/README.md

# -- the known-gaps mechanism -------------------------------------------------------------


def load_gaps() -> dict[str, dict[str, str]]:
    return json.loads(KNOWN_GAPS.read_text(encoding="utf-8"))


def reconcile(kind: str, results: dict[str, tuple[bool, str]], gaps: dict[str, str]) -> list[str]:
    """Problems with `results` (name -> (ok, detail)) given the allowed `gaps` (name -> reason)."""
    problems = []
    for name, (ok, detail) in results.items():
        if not ok and name not in gaps:
            problems.append(f"{kind} {name!r} fails and is not a known gap:\n{detail}")
        if ok and name in gaps:
            problems.append(f"{kind} {name!r} passes now: remove it from {KNOWN_GAPS.name} ({gaps[name]})")
    for name in gaps:
        if name not in results:
            problems.append(f"{kind} {name!r} is listed in {KNOWN_GAPS.name} but no such check exists")
    return problems


def test_known_gaps_file_shape() -> None:
    gaps = load_gaps()
    assert set(gaps) == {"recordings", "cases"}
    for section in gaps.values():
        assert isinstance(section, dict)
        for name, reason in section.items():
            assert isinstance(name, str) and name
            assert isinstance(reason, str) and reason.strip(), f"known gap {name!r} needs a reason"


def test_reconcile_flags_new_failures_fixed_gaps_and_stale_entries() -> None:
    results = {"a": (True, ""), "b": (False, "diff b"), "c": (False, "diff c"), "d": (True, "")}
    assert reconcile("check", results, {"c": "why", "d": "why"}) == [
        "check 'b' fails and is not a known gap:\ndiff b",
        f"check 'd' passes now: remove it from {KNOWN_GAPS.name} (why)",
    ]
    assert reconcile("check", results, {"b": "x", "c": "y", "zz": "z"}) == [
        f"check 'zz' is listed in {KNOWN_GAPS.name} but no such check exists"
    ]
    assert reconcile("check", {"a": (True, "")}, {}) == []


# -- parity over ../shared -------------------------------------------------------------


def test_recording_checks(recordings_root: Path, golden_root: Path) -> None:
    checks = list(check_recordings(recordings_root, golden_root))
    names = [check.name for check in checks]
    assert len(names) == len(set(names)), "check names must be unique"
    # every golden cell is actually compared
    cells = sorted(
        path.parent.relative_to(golden_root).as_posix() for path in golden_root.glob("*/*/raw-events.ndjson")
    )
    assert cells, "no golden cells found"
    missing = [cell for cell in cells if f"{cell} raw-events" not in names]
    assert not missing, f"golden cells without a raw-events check: {missing}"
    results = {check.name: (check.ok, check.detail) for check in checks}
    problems = reconcile("recording check", results, load_gaps()["recordings"])
    assert not problems, "\n".join(problems)


def test_synthetic_cases(cases_path: Path) -> None:
    results: dict[str, tuple[bool, str]] = {}
    for case in read_cases(cases_path):
        result = run_case(case)
        detail = "" if result.ok else f"  step {result.step}\n  expected: {result.expected}\n  got:      {result.got}"
        assert result.case_id not in results, f"duplicate case id {result.case_id}"
        results[result.case_id] = (result.ok, detail)
    assert len(results) == SYNTHETIC_CASES
    problems = reconcile("case", results, load_gaps()["cases"])
    assert not problems, "\n".join(problems[:10]) + (f"\n… {len(problems) - 10} more" if len(problems) > 10 else "")


# -- the CLI contract over ../shared ------------------------------------------------------


def bbridge(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "bbridge", *map(str, args)], cwd=REPO, capture_output=True, timeout=120, check=False
    )


def _lines(stdout: bytes) -> list[str]:
    return stdout.decode("utf-8").split("\n")


def test_cli_parity_recordings(recordings_root: Path, golden_root: Path) -> None:
    gaps = load_gaps()["recordings"]
    proc = bbridge("parity", "recordings", recordings_root, "--golden", golden_root)
    lines = _lines(proc.stdout)
    assert lines[-1] == "", "output ends with a newline"
    *body, summary = lines[:-1]
    verdicts = [line for line in body if not line.startswith(" ")]
    assert all(re.fullmatch(r"(PASS|FAIL) \S+/\S+ \S+", line) for line in verdicts), verdicts
    checks = list(check_recordings(recordings_root, golden_root))
    assert [line.split(" ", 1)[1] for line in verdicts] == [check.name for check in checks]
    failed = len(gaps)
    assert summary == f"{len(checks) - failed} passed, {failed} failed"
    assert proc.returncode == (1 if failed else 0), proc.stderr


def test_cli_parity_cases(cases_path: Path) -> None:
    failed = len(load_gaps()["cases"])
    proc = bbridge("parity", "cases", cases_path)
    assert _lines(proc.stdout)[-2:] == [f"{SYNTHETIC_CASES - failed} passed, {failed} failed", ""]
    assert proc.returncode == (1 if failed else 0), proc.stderr


@pytest.mark.parametrize(
    ("flags", "golden_name"),
    [
        ((), "raw-events.ndjson"),
        (("--flush-ms", "100", "--clock", "recorded"), "raw-events.coalesced.ndjson"),
    ],
    ids=["raw", "coalesced"],
)
def test_cli_replay_matches_golden(
    recordings_root: Path, golden_root: Path, flags: tuple[str, ...], golden_name: str
) -> None:
    golden = golden_root / REPLAY_CELL / golden_name
    if f"{REPLAY_CELL} {golden_name.removesuffix('.ndjson')}" in load_gaps()["recordings"]:
        pytest.skip("listed in known_gaps.json")
    proc = bbridge("replay", recordings_root / REPLAY_CELL, *flags, "--unstamped")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == golden.read_bytes()


# -- fresh-clone CLI tests (no ../shared needed) --------------------------------------------

THREAD = "thr_tiny"
PROVIDER_THREAD = "prov-tiny"


def _entry(seq: float, direction: str, message: dict[str, Any], ts: int = 1_000) -> str:
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return json.dumps({"ts": ts + int(seq), "run": 1, "seq": seq, "dir": direction, "line": line}, ensure_ascii=False)


def _delta(deltas: list[Any], thread: str = THREAD) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": thread, "deltas": deltas}}


TINY_LANE = [
    _entry(1, "bridge→runtime", {"jsonrpc": "2.0", "id": 1, "result": {}}),
    _entry(
        2,
        "bridge→runtime",
        {
            "jsonrpc": "2.0",
            "method": "thread/identity",
            "params": {"threadId": THREAD, "providerThreadId": PROVIDER_THREAD},
        },
    ),
    _entry(
        3,
        "bridge→runtime",
        _delta(
            [
                {"kind": "turn.open"},
                {"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": "Hi"},
                {"kind": "item.textClose", "key": {"channel": "assistant"}, "channel": "agentMessage"},
            ]
        ),
    ),
    _entry(4, "bridge→runtime", _delta([{"kind": "turn.open"}, {"kind": "message.delta", "text": "v2"}])),
    _entry(5, "bridge→runtime", _delta([{"kind": "turn.boundary", "status": "completed"}])),
]

_E = '"threadId":"","providerThreadId":""'
_SCOPE = '"scope":{"kind":"turn","turnId":"da00000000-t1"}'
TINY_GOLDEN = [
    f'{{"type":"turn/started",{_E},{_SCOPE}}}',
    f'{{"type":"item/started",{_E},{_SCOPE},"item":{{"type":"agentMessage","id":"da00000000-i1","text":""}}}}',
    f'{{"type":"item/agentMessage/delta",{_E},{_SCOPE},"itemId":"da00000000-i1","delta":"Hi"}}',
    f'{{"type":"item/completed",{_E},{_SCOPE},"item":{{"type":"agentMessage","id":"da00000000-i1","text":"Hi"}}}}',
    f'{{"type":"turn/completed",{_E},{_SCOPE},"status":"completed"}}',
]


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    """`(recordings root, golden root)` holding one cell `echo/tiny` whose goldens match."""
    cell = tmp_path / "recordings" / "echo" / "tiny"
    cell.mkdir(parents=True)
    (cell / "bridge→runtime.ndjson").write_text("\n".join(TINY_LANE) + "\n", encoding="utf-8")
    (cell / "runtime→bridge.ndjson").write_text(
        _entry(0.5, "runtime→bridge", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}) + "\n",
        encoding="utf-8",
    )
    pins = {"echo/tiny": {"events": 5, "rows": 1, "unhandled": 0, "grammarDrops": 0}}
    (tmp_path / "recordings" / "row-counts.json").write_text(json.dumps(pins), encoding="utf-8")
    golden = tmp_path / "golden" / "echo" / "tiny"
    golden.mkdir(parents=True)
    text = "\n".join(TINY_GOLDEN) + "\n"
    (golden / "raw-events.ndjson").write_text(text, encoding="utf-8")
    (golden / "raw-events.coalesced.ndjson").write_text(text, encoding="utf-8")
    (golden / "grammar-drops.json").write_text("[]", encoding="utf-8")
    return tmp_path / "recordings", tmp_path / "golden"


def test_tiny_replay_unstamped(tiny: tuple[Path, Path]) -> None:
    recordings, golden = tiny
    proc = bbridge("replay", recordings / "echo" / "tiny", "--unstamped")
    assert proc.returncode == 0
    assert proc.stdout == (golden / "echo" / "tiny" / "raw-events.ndjson").read_bytes()
    # the notification carrying a v2 kind is skipped whole, and said so on stderr
    err = proc.stderr.decode()
    assert "skipped an invalid thread/delta notification" in err
    assert "$.deltas[1]" in err


def test_tiny_replay_stamped(tiny: tuple[Path, Path]) -> None:
    recordings, _ = tiny
    proc = bbridge("replay", recordings / "echo" / "tiny")
    assert proc.returncode == 0
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [e["type"] for e in events] == [json.loads(line)["type"] for line in TINY_GOLDEN]
    for event in events:
        assert list(event)[:3] == ["type", "threadId", "providerThreadId"]
        assert event["threadId"] == THREAD
        assert event["providerThreadId"] == PROVIDER_THREAD


def test_tiny_parity_recordings_pass(tiny: tuple[Path, Path]) -> None:
    recordings, golden = tiny
    proc = bbridge("parity", "recordings", recordings, "--golden", golden)
    assert proc.returncode == 0, proc.stdout.decode()
    assert proc.stdout.decode() == (
        "PASS echo/tiny raw-events\n"
        "PASS echo/tiny raw-events.coalesced\n"
        "PASS echo/tiny grammar-drops\n"
        "PASS echo/tiny events\n"
        "PASS echo/tiny unhandled\n"
        "PASS echo/tiny grammarDrops\n"
        "6 passed, 0 failed\n"
    )


def test_tiny_parity_recordings_fail_shows_expected_and_got(tiny: tuple[Path, Path]) -> None:
    recordings, golden = tiny
    wrong = TINY_GOLDEN.copy()
    wrong[2] = wrong[2].replace('"Hi"', '"Ho"')
    (golden / "echo" / "tiny" / "raw-events.ndjson").write_text("\n".join(wrong) + "\n", encoding="utf-8")
    pins = {"echo/tiny": {"events": 4, "rows": 1, "unhandled": 0, "grammarDrops": 0}}
    (recordings / "row-counts.json").write_text(json.dumps(pins), encoding="utf-8")
    proc = bbridge("parity", "recordings", recordings, "--golden", golden)
    assert proc.returncode == 1
    assert proc.stdout.decode() == (
        "FAIL echo/tiny raw-events\n"
        "  line 3:\n"
        f"    expected: {wrong[2]}\n"
        f"    got:      {TINY_GOLDEN[2]}\n"
        "PASS echo/tiny raw-events.coalesced\n"
        "PASS echo/tiny grammar-drops\n"
        "FAIL echo/tiny events\n"
        "  expected: 4\n"
        "  got:      5\n"
        "PASS echo/tiny unhandled\n"
        "PASS echo/tiny grammarDrops\n"
        "4 passed, 2 failed\n"
    )


def test_tiny_parity_recordings_missing_output_line(tiny: tuple[Path, Path]) -> None:
    recordings, golden = tiny
    (golden / "echo" / "tiny" / "raw-events.ndjson").write_text("\n".join(TINY_GOLDEN[:4]) + "\n", encoding="utf-8")
    proc = bbridge("parity", "recordings", recordings, "--golden", golden)
    assert proc.returncode == 1
    out = proc.stdout.decode()
    assert (
        f"FAIL echo/tiny raw-events\n  line 5:\n    expected: <end of output>\n    got:      {TINY_GOLDEN[4]}\n" in out
    )
    assert out.endswith("5 passed, 1 failed\n")


def test_tiny_parity_cases(tmp_path: Path) -> None:
    good = {
        "id": "9-1",
        "providerId": "echo",
        "steps": [
            {"now": 1, "threadId": "thr_x", "deltas": [{"kind": "turn.open"}]},
            {"now": 2, "threadId": "", "deltas": []},
            {"now": 1002, "threadId": "thr_x", "deltas": []},
        ],
        "expected": [
            {"events": [json.loads(TINY_GOLDEN[0])], "grammarDrops": []},
            {"rejected": True, "issues": ["threadId: too small"]},
            {"events": [], "grammarDrops": []},
        ],
    }
    bad = json.loads(json.dumps(good))
    bad["id"] = "9-2"
    bad["expected"][0]["events"][0]["scope"]["turnId"] = "da00000000-t2"
    path = tmp_path / "cases.ndjson"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    assert [run_case(case).ok for case in read_cases(path)] == [True, False]

    proc = bbridge("parity", "cases", path)
    assert proc.returncode == 1
    assert proc.stdout.decode() == "FAIL 9-2 step 0\n1 passed, 1 failed\n"
    proc = bbridge("parity", "cases", path, "--first-failure")
    lines = proc.stdout.decode().split("\n")
    assert lines[0] == "FAIL 9-2 step 0"
    assert lines[1].startswith("  expected: ") and '"da00000000-t2"' in lines[1]
    assert lines[2].startswith("  got:      ") and '"da00000000-t1"' in lines[2]
    assert lines[3:] == ["1 passed, 1 failed", ""]


def test_cli_reports_unreadable_recordings(tmp_path: Path) -> None:
    cell = tmp_path / "echo" / "broken"
    cell.mkdir(parents=True)
    (cell / "bridge→runtime.ndjson").write_text("not json\n", encoding="utf-8")
    proc = bbridge("replay", cell)
    assert proc.returncode == 2
    assert f"{cell / 'bridge→runtime.ndjson'}:1" in proc.stderr.decode()
