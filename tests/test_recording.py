"""Recording a session for CI (issue 37, step 1): `bbridge run --record`, `--redact`, the cell's README and
manifest, and redaction that keeps every lane line valid JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio
import trio.testing

from bbridge.replay.recording import MadeBy, finish
from bbridge.wire import redact
from bbridge.wire.lanes import (
    BRIDGE_TO_RUNTIME,
    PROVIDER_TO_BRIDGE,
    RECORD_ENV,
    RUNTIME_TO_BRIDGE,
    Recorder,
    read_cell,
)

TINY = Path(__file__).parent / "fakes" / "tiny_bridge.py"
SECRET = "sk-live0123456789abcdefXYZ"


def redactor(*regexes: str, home: str = "/home/someone") -> redact.Redactor:
    return redact.Redactor([*redact.default_redactions(home), *redact.user_redactions(regexes)])


def test_a_json_line_stays_json_whatever_the_pattern_matches() -> None:
    counts: Counter[str] = Counter()
    # a pattern that matches a quote and a backslash: on raw bytes it would cut the escapes apart
    line = json.dumps({"params": {"text": 'say "hi" \\ to /home/someone/w', "apiKey": "abc", "n": 1.5}})
    out = redactor(r'"hi" \\').line(line, counts)
    assert json.loads(out) == {
        "params": {
            "text": "say [redacted:pattern-1] to [redacted:home]/w",
            "apiKey": "[redacted:secret-field]",
            "n": 1.5,
        }
    }
    assert counts == {"pattern-1": 1, "home": 1, "secret-field": 1}


def test_the_home_directory_is_redacted_as_a_whole_path_segment() -> None:
    counts: Counter[str] = Counter()
    text = redactor(home="/home/u").line("/home/u/w and /home/user2 and /home/u", counts)
    assert text == "[redacted:home]/w and /home/user2 and [redacted:home]"


def test_a_line_nothing_matched_is_kept_byte_for_byte_and_text_lines_are_redacted_as_text() -> None:
    counts: Counter[str] = Counter()
    line = '{"b": 1,   "a": "x", "inputTokens": 12}'
    assert redactor().line(line, counts) == line
    assert redactor().line(f"not json {SECRET}", counts) == "not json [redacted:api-key]"
    assert counts == {"api-key": 1}


def test_numbers_json_cannot_carry_as_doubles_fall_back_to_text() -> None:
    counts: Counter[str] = Counter()
    assert redactor("x").line('{"a":"x","n":1e400}', counts) == '{"a":"[redacted:pattern-1]","n":1e400}'
    assert counts == {"pattern-1": 1}


def test_a_pattern_that_does_not_compile_is_named() -> None:
    try:
        redact.user_redactions(["ok", "(unclosed"])
    except ValueError as exc:
        assert "(unclosed" in str(exc)
    else:
        raise AssertionError("accepted a broken pattern")


def test_the_recorder_redacts_before_writing_and_finish_reports_the_counts(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    recorder = Recorder(root / "bridge", redactor=redactor("hunter2"))
    start = {"jsonrpc": "2.0", "id": 1, "method": "thread/start", "params": {"threadId": "t1", "cwd": "/tmp"}}
    recorder.record(RUNTIME_TO_BRIDGE, "t1", json.dumps(start))
    recorder.record(BRIDGE_TO_RUNTIME, "t1", json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"k": "hunter2"}}))
    recorder.close()
    # a bridge that writes its provider lane without the kit: redacted by finish
    (root / "bridge" / "t1" / f"{PROVIDER_TO_BRIDGE}.ndjson").write_text(
        json.dumps({"ts": 1, "run": 1, "seq": 9, "dir": PROVIDER_TO_BRIDGE, "line": "token hunter2"}) + "\n"
    )
    assert len(list((root / "bridge" / "t1").glob(redact.SIDECAR_GLOB))) == 1
    [cell] = finish(root, MadeBy("bbridge serve --record rec", {"bridge": "tiny"}, "bbridge 0"), recorder_patterns())
    text = "".join(p.read_text() for p in cell.iterdir())
    assert "hunter2" not in text
    assert not list(cell.glob(redact.SIDECAR_GLOB))
    manifest = json.loads((cell / "manifest.json").read_text())
    assert {r["name"]: r["replaced"] for r in manifest["redactions"]}["pattern-1"] == 2
    assert manifest["threadId"] == "t1" and manifest["lines"][PROVIDER_TO_BRIDGE] == 1
    assert "| pattern-1 | `(a literal of 7 characters, not shown)` | 2 |" in (cell / "README").read_text()
    assert "token [redacted:pattern-1]" in [e.line for e in read_cell(cell)]


def recorder_patterns() -> list[redact.Pattern]:
    return [*redact.default_redactions("/home/someone"), *redact.user_redactions(["hunter2"])]


def test_run_record_leaves_a_named_redacted_cell_that_replays(tmp_path: Path) -> None:
    out = tmp_path / "cells"
    done = subprocess.run(
        [sys.executable, "-m", "bbridge", "run", "--provider-cmd", f"{sys.executable} {TINY}", "--json",
         "--prompt", f"hello {SECRET} world", "--record", str(out), "--cell", "hello", "--redact", "wor+ld"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cell = out / "bridge" / "hello"
    assert sorted(p.name for p in cell.iterdir()) == [
        "README", "bridge→runtime.ndjson", "manifest.json", "runtime→bridge.ndjson"
    ]  # fmt: skip
    everything = "".join(p.read_text() for p in cell.iterdir())
    assert SECRET not in everything and "world" not in everything
    for lane in cell.glob("*.ndjson"):
        for raw in lane.read_text().splitlines():
            json.loads(json.loads(raw)["line"])  # every entry, and the line it carries, is JSON
    readme = (cell / "README").read_text()
    assert "bbridge run --provider-cmd" in readme and "tiny_bridge.py" in readme and "bbridge 0.1.0" in readme
    assert "| api-key |" in readme and "| pattern-1 | `wor+ld` | 1 |" in readme
    replayed = subprocess.run(
        [sys.executable, "-m", "bbridge", "replay", str(cell), "--unstamped"], capture_output=True, timeout=60
    )
    events = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert any(e.get("delta") == "olleh" for e in events), events


async def test_a_kit_bridge_redacts_its_provider_lanes_with_the_list_the_daemon_hands_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bbridge import kit
    from bbridge.daemon.bridge import bridge_env
    from bbridge.daemon.config import echo_provider

    env = bridge_env("p", echo_provider(), {}, tmp_path, redact.user_redactions(["hunter2"]))
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "p"))
    monkeypatch.setenv(redact.REDACT_ENV, env[redact.REDACT_ENV])
    assert redact.REDACT_ENV not in kit.env_without_runtime(env)  # a provider child does not record
    kit.process_recorder.cache_clear()
    try:
        child_out, from_child = trio.testing.memory_stream_one_way_pair()
        _, stdout = kit.record_child_io(trio.testing.memory_stream_one_way_pair()[0], from_child, thread_id="t")
        await child_out.send_all(b'{"said":"hunter2"}\n')
        await stdout.receive_some()
    finally:
        kit.process_recorder.cache_clear()
    [entry] = read_cell(tmp_path / "p" / "t")
    assert entry.line == '{"said":"[redacted:pattern-1]"}'
