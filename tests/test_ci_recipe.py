"""docs/testing-in-ci.md ("Testing your bridge in CI"), run as written (issue 37, step 4): the commands are read
from docs/ci/ (which the page quotes verbatim) and run on a small bridge of the tests' own (tests/fakes/tiny_bridge.py,
not an agent bridge): record a session, bless it, replay it (pass); change one delta of the bridge's output (fail,
the diff in the JUnit report, an annotation on GitHub); accept the change (--update), replay again (pass)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from tests.junit_support import assert_valid

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "ci"
TINY = Path(__file__).parent / "fakes" / "tiny_bridge.py"
BRIDGE = f"{sys.executable} {TINY}"


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
    environment = {**inherited, "PATH": path, "BRIDGE": bridge, **env}
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
