"""docs/testing-in-ci.md ("Testing your bridge in CI"), run as written (issue 37, step 4): the commands are read
from docs/ci/ (which the page quotes verbatim) and run on a small bridge of the tests' own (tests/fakes/tiny_bridge.py,
not an agent bridge): record a session, bless it, replay it (pass); change one delta of the bridge's output (fail,
the diff in the JUnit report, an annotation on GitHub); accept the change (--update), replay again (pass). Then the
same recipe on bridges whose handles change on every run: the echo bridge (it mints its sessions and checkpoints),
and the Claude Code and codex bridges driven by a CLI that mints its own (tests/fakes/minting_provider.py: a
reference cell's provider lanes, fresh UUIDs on every run)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from bbridge.replay.cells import replay_cell
from bbridge.replay.handles import HANDLES
from tests.conftest import require_shared
from tests.junit_support import assert_valid

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "ci"
TINY = Path(__file__).parent / "fakes" / "tiny_bridge.py"
BRIDGE = f"{sys.executable} {TINY}"
MINTING = Path(__file__).parent / "fakes" / "minting_provider.py"


def step_run(workflow: str, name: str) -> str:
    """The `run:` text of the workflow's step `name` (a `run: |` block or a one-line `run:`)."""
    lines = workflow.splitlines()
    start = lines.index(f"      - name: {name}")
    for number in range(start + 1, len(lines)):
        key, _, value = lines[number].strip().partition(": ")
        if lines[number].strip() == "run: |":
            block = []
            for line in lines[number + 1 :]:
                if line.strip() and not line.startswith(" " * 10):
                    break
                block.append(line[10:])
            return "\n".join(block).strip() + "\n"
        if key == "run":
            return value + "\n"
    raise AssertionError(f"no run: in step {name!r}")


def sh(script: str, cwd: Path, bridge: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` in sh, as the docs' scripts and GitHub's `run:` steps are, with bbridge (this venv's) on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    inherited = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}  # annotations only when asked
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)  # `-m bridges.…`
    environment = {**inherited, "PATH": path, "PYTHONPATH": pythonpath, "BRIDGE": bridge, **env}
    return subprocess.run(["sh", "-c", script], cwd=cwd, env=environment, capture_output=True, text=True, timeout=120)


def report(path: Path) -> etree._Element:
    root = etree.parse(str(path)).getroot()
    assert_valid(root)
    [suite] = root.findall("testsuite")
    return suite


@pytest.fixture(scope="module")
def recipe() -> dict[str, str]:
    texts = {p.name: p.read_text(encoding="utf-8") for p in DOCS.iterdir()}
    assert set(texts) == {"record-and-bless.sh", "accept-a-change.sh", "bridge-replay.yml"}
    return texts


def test_the_page_quotes_the_recipe_files_verbatim(recipe: dict[str, str]) -> None:
    page = (REPO / "docs" / "testing-in-ci.md").read_text(encoding="utf-8")
    for text in recipe.values():
        assert text in page


def test_the_workflow_installs_bbridge_replays_and_uploads_the_report(recipe: dict[str, str]) -> None:
    workflow = recipe["bridge-replay.yml"]
    assert "pip install" in step_run(workflow, "Install bbridge")
    replay = step_run(workflow, "Replay the recorded cells")
    junit = replay.split("--junit ", 1)[1].split()[0]
    upload = workflow[workflow.index("      - name: Upload the JUnit report") :]
    assert "uses: actions/upload-artifact@" in upload and f"path: {junit}" in upload and "if: always()" in upload


def test_record_bless_replay_pass_then_a_changed_delta_fails_with_its_diff(
    recipe: dict[str, str], tmp_path: Path
) -> None:
    recorded = sh(recipe["record-and-bless.sh"], tmp_path, BRIDGE)
    assert recorded.returncode == 0, recorded.stderr
    assert (tmp_path / "tests" / "bridge-cells" / "bridge" / "hello" / "README").exists()
    assert (tmp_path / "tests" / "bridge-golden" / "bridge" / "hello" / "raw-events.ndjson").exists()

    replay = step_run(recipe["bridge-replay.yml"], "Replay the recorded cells")
    junit = tmp_path / replay.split("--junit ", 1)[1].split()[0]
    passed = sh(replay, tmp_path, BRIDGE, GITHUB_ACTIONS="true")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.endswith("1 passed, 0 failed, 1 skipped\n")  # the process-scoped cell is skipped
    suite = report(junit)
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "0", "1")
    assert "::error" not in passed.stdout

    changed = f"{BRIDGE} --changed"  # the last word of the answer gets a "!"
    failed = sh(replay, tmp_path, changed, GITHUB_ACTIONS="true")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    suite = report(junit)
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failure = suite.find("testcase[@name='bridge/hello']/failure")
    assert failure is not None and failure.text is not None
    assert '-{"type":"item/agentMessage/delta"' in failure.text and '"delta":" ereht!"}' in failure.text
    assert any(line.startswith("::error title=parity.bridge%3A bridge/hello::") for line in failed.stdout.splitlines())

    accepted = sh(recipe["accept-a-change.sh"], tmp_path, changed)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "UPDATED bridge/hello" in accepted.stdout and '+{"type":"item/agentMessage/delta"' in accepted.stdout
    assert sh(replay, tmp_path, changed).returncode == 0
    assert sh(replay, tmp_path, BRIDGE).returncode == 1  # the old output is now the regression


def minting_bridge(bridge: str, scratch: Path) -> str:
    """BRIDGE for `bridge`: the echo bridge as it is; an agent bridge with the minting CLI playing a reference
    cell's provider lanes in place of the real CLI (a one-turn cell: `thread/start`, `turn/start`)."""
    python = sys.executable
    if bridge == "echo":
        return f"{python} -m bridges.echo"
    cell = require_shared("recordings", bridge, "web-search")
    dialect = "claude-cli" if bridge == "claude-code" else "json-rpc"
    cli = [python, str(MINTING), "--recording", str(cell), "--dialect", dialect, "--scratch", str(scratch / "cli")]
    if bridge == "codex":
        variables = [
            f"BB_CODEX_BRIDGE_APP_SERVER_COMMAND={python}",
            f"BB_CODEX_BRIDGE_APP_SERVER_ARGS={json.dumps(cli[1:])}",
        ]
        return shlex.join(["env", *variables, python, "-m", "bridges.codex"])
    wrapper = scratch / "claude"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(cli)} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    variables = [f"BB_CLAUDE_CODE_EXECUTABLE={wrapper}", f"CLAUDE_CONFIG_DIR={scratch / 'claude-config'}"]
    return shlex.join(["env", *variables, python, "-m", "bridges.claude_code"])


def handles(events: list[dict[str, object]]) -> list[object]:
    """The provider handles of a stream of events, in order (the unstamped `""`s left out)."""
    return [e[key] for e in events for key in HANDLES if e.get(key)]


@pytest.mark.parametrize("bridge", ["echo", "claude-code", "codex"])
def test_the_recipe_passes_on_a_bridge_whose_handles_change_on_every_run(
    bridge: str, recipe: dict[str, str], tmp_path: Path
) -> None:
    """The handles in the goldens are numbered by first appearance; the replay's, new ones, are numbered the same
    way."""
    (tmp_path / "scratch").mkdir()
    command = minting_bridge(bridge, tmp_path / "scratch")
    work = tmp_path / "repository"
    work.mkdir()
    recorded = sh(recipe["record-and-bless.sh"], work, command)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    replay = step_run(recipe["bridge-replay.yml"], "Replay the recorded cells")
    passed = sh(replay, work, command)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.endswith("1 passed, 0 failed, 1 skipped\n")

    minted = handles(replay_cell(work / "tests" / "bridge-cells" / "bridge" / "hello", "bridge").events)
    golden = (work / "tests" / "bridge-golden" / "bridge" / "hello" / "raw-events.ndjson").read_text(encoding="utf-8")
    blessed = handles([json.loads(line) for line in golden.splitlines()])
    assert minted and len(blessed) == len(minted)
    assert all(re.fullmatch(r"da00000000-h[1-9][0-9]*", str(h)) for h in blessed), blessed
    assert not any(str(h) in golden for h in minted)
    dumped = sh('bbridge parity bridge --provider-cmd "$BRIDGE" --golden tests/bridge-golden --dump-dir dump '
                "tests/bridge-cells/bridge/hello", work, command)  # fmt: skip
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    replayed = handles([json.loads(line) for line in (work / "dump" / "bridge-hello.ndjson").read_text().splitlines()])
    assert len(replayed) == len(minted) and not set(replayed) & set(minted)  # new handles, every run
