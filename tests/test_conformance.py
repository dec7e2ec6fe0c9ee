"""`bbridge conformance`: the echo bridge passes every rule, and broken bridges prove each rule can fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bbridge.conformance import FixtureError, Result, UsageError, run_conformance
from bbridge.conformance.fixture import DEFAULT_FIXTURE, load_fixture, parse_fixture
from bbridge.conformance.recorded import CHECKS
from bbridge.conformance.scripted import RULES, RequestIds
from tests.conftest import REPO, require_shared

FAKE = [sys.executable, str(REPO / "tests" / "fakes" / "conformance_bridge.py")]
DAEMON_FAKE = [sys.executable, str(REPO / "tests" / "fakes" / "fake_bridge.py")]
REPLAY_FAKE = [sys.executable, str(REPO / "tests" / "fakes" / "replay_bridge.py"), "{cell}"]
ECHO = [sys.executable, "-m", "bridges.echo"]
ACP = [sys.executable, "-m", "bridges.acp"]


def text(prompt: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": prompt, "mentions": []}]


# Short bounds for bridges that are meant to fail: a hung rule costs ~1 s, never a hang.
QUICK: dict[str, Any] = {
    "promptInput": text("hi"),
    "zeroWorkPromptInput": text("noop"),
    "interruptPromptInput": text("hold"),
    "icons": {"pluginId": "fake", "names": ["star"]},
    "timeouts": {"waitMs": 1000, "replayWaitMs": 1000, "replayOrderMs": 100, "replayDrainMs": 20, "replaySettleMs": 50},
}


async def check(
    command: list[str], fixture: dict[str, Any] = QUICK, recordings: Path | None = None
) -> dict[str, Result]:
    results = await run_conformance(command, parse_fixture(fixture), recordings)
    return {r.rule: r for r in results}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bbridge", "conformance", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_echo_bridge_passes_every_rule() -> None:
    done = cli("--", *ECHO)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[-1] == f"{len(RULES) - 1} passed, 0 failed"  # the fixture declares no icons: that rule is SKIP
    assert [line.split()[1] for line in lines[: len(RULES)]] == list(RULES)
    assert not [line for line in lines if line.startswith("FAIL")]


async def test_well_behaved_stdlib_bridge_passes_every_rule() -> None:
    results = await check(FAKE, {**QUICK, "timeouts": {}})
    assert {r.status for r in results.values() if not r.rule.startswith("recorded/")} == {"PASS"}


async def test_invalid_params_may_carry_the_issues_in_the_message() -> None:
    """The Claude Code and Codex references send no `data`; their message names the issues (§1.8 holds)."""
    result = (await check([*FAKE, "issues-in-message"]))["rpc/invalid-params"]
    assert result.status == "PASS", result.reason
    assert "params.threadId: Required" in result.reason


@pytest.mark.parametrize(
    ("mode", "rule", "reason"),
    [
        ("drop-unknown", "rpc/unknown-method", "silently dropped"),
        ("invalid-as-error", "rpc/invalid-params", "instead of -32602"),
        ("bare-invalid", "rpc/invalid-params", "without the validation issues"),
        ("die-on-junk", "rpc/non-json-ignored", "stopped serving"),
        ("answer-responses", "rpc/response-not-request", "not a request"),
        ("old-protocol", "handshake/initialize", "requires version 2"),
        ("response-first", "session/start-identity", "no thread/identity"),
        ("silent-turn", "turn/lifecycle", "never completed"),
        ("invalid-delta", "events/schema-valid", "invalid thread/delta"),
        ("delta-before-open", "item/opens-before-delta", "arrived before item/started"),
        ("release-interrupts", "stop/release-not-interrupted", "fabricated"),
        ("no-reset-on-resume", "session/resume-id-uniqueness", "repeated"),
        ("zero-work-hangs", "turn/settles-without-activity", "must still settle"),
        ("double-open", "turn/starts-once", "already open"),
        ("double-boundary", "turn/settles-once", "already completed"),
        ("ghost-boundary", "turn/known", "never started"),
        ("dual-settle", "item/settles-once", "already settled"),
        ("settle-after-stop", "turn/interrupt-settles-before-response", "the stop's response"),
        ("skills-error", "skills/configure-matches-declaration", "must answer -32601"),
        ("foreign-icon", "presentation/icon-namespaced-declared", "'other/star'"),
        ("close-unopened", "item/opens-before-close", 'item.textClose for item key {"providerItemId":"msg1"}'),
        ("double-close", "item/closes-once", '{"providerItemId":"msg-1"}, which already closed'),
        ("reuse-key", "item/opens-before-delta", 'key: {"providerItemId":"msg"}. That key\'s item already completed'),
        ("delta-before-open", "item/opens-before-delta", 'The bridge\'s item key: {"providerItemId":"cmd-1"}.'),
    ],
)
async def test_each_scripted_rule_can_fail(mode: str, rule: str, reason: str) -> None:
    result = (await check([*FAKE, mode]))[rule]
    assert result.status == "FAIL"
    assert reason in result.reason


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ([*FAKE, "silent-turn"], "turn/lifecycle"),  # turns that never settle
        ([*FAKE, "old-protocol"], "handshake/initialize"),  # initialize answers protocol version 1
        ([*DAEMON_FAKE, "silent-turn"], "rpc/non-json-ignored"),  # the daemon tests' fake dies on a non-JSON line
    ],
)
def test_broken_bridges_fail_the_cli(tmp_path: Path, command: list[str], rule: str) -> None:
    fixture = tmp_path / "quick.json"
    fixture.write_text(json.dumps(QUICK))
    done = cli("--fixture", str(fixture), "--", *command)
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert any(line.startswith(f"FAIL {rule} — ") for line in lines)
    passed, failed = (sum(line.startswith(status) for line in lines) for status in ("PASS ", "FAIL "))
    assert lines[-1] == f"{passed} passed, {failed} failed"


async def test_a_bridge_that_dies_is_reported_with_its_exit_code_stray_stdout_and_stderr_tail() -> None:
    script = "import sys; print('Listening on :8080'); sys.stderr.write('Traceback\\nValueError: KEY is not set\\n'); sys.exit(3)"
    results = await check([sys.executable, "-c", script])
    reason = results["handshake/initialize"].reason
    assert reason == (
        'initialize got no answer: the bridge exited with code 3; its stdout was not JSON-RPC: "Listening on :8080"; '
        'its stderr ended: "Traceback" / "ValueError: KEY is not set"'
    )


async def test_a_hung_bridge_yields_failures_not_a_hang() -> None:
    results = await check([sys.executable, "-c", "import time; time.sleep(600)"])
    assert results["rpc/unknown-method"].status == "FAIL"
    assert results["handshake/initialize"].status == "FAIL"
    assert results["turn/lifecycle"].status == "SKIP"  # a failed prerequisite skips, it does not cascade


async def test_no_recordings_skips_the_recorded_rules() -> None:
    results = await check(FAKE)
    assert [results[f"recorded/<cell>/{c}"].status for c in CHECKS] == ["SKIP"] * len(CHECKS)


async def test_optional_rules_skip_without_their_fixture() -> None:
    fixture = {"promptInput": text("hi")}
    results = await check(FAKE, fixture)
    for rule in (
        "turn/settles-without-activity",
        "turn/interrupt-settles-before-response",
        "presentation/icon-namespaced-declared",
    ):
        assert results[rule].status == "SKIP"


async def test_declared_skills_must_be_configurable() -> None:
    results = await check(FAKE, {**QUICK, "skills": {"declared": True}})
    assert results["skills/configure-matches-declaration"].status == "FAIL"


# -- recorded cells (§7.4) -------------------------------------------------------------


async def test_recorded_cells_replay_through_a_generic_bridge() -> None:
    codex = require_shared("recordings", "codex")
    results = await check(FAKE, recordings=codex)
    recorded = [r for r in results.values() if r.rule.startswith("recorded/")]
    assert len(recorded) == 5 * 7  # codex records 7 of the 8 conformance cells (no approval-deny)
    assert {r.status for r in results.values()} - {"SKIP"} == {"PASS"}


async def test_recorded_cells_replay_through_the_recording_itself() -> None:
    """The replaying fake plays each cell's own bridge lane back: the live replay matches the recording."""
    codex = require_shared("recordings", "codex")
    results = await check(REPLAY_FAKE, recordings=codex)
    assert {r.status for r in results.values() if r.rule.startswith("recorded/")} == {"PASS"}
    assert "replay 2 started/2 completed, recording 2/2" in results["recorded/resume/turn-lifecycle"].reason


@pytest.mark.parametrize(
    ("mode", "failing"),
    [
        ("mute", {"replays", "turn-lifecycle", "not-empty"}),
        ("silent-turn", {"replays", "turn-lifecycle"}),
        ("invalid-delta", {"events-schema-valid"}),
        ("no-reset-on-resume", {"grammar"}),
    ],
)
async def test_each_recorded_rule_can_fail(mode: str, failing: set[str]) -> None:
    cell = require_shared("recordings", "codex", "resume")
    results = await check([*FAKE, mode], recordings=cell)
    assert {c for c in CHECKS if results[f"recorded/resume/{c}"].status == "FAIL"} == failing


def test_recorded_acp_cells_pass_through_the_acp_bridge_and_the_fake_agent() -> None:
    """§6.2's `acp-*` profile: each launch spec is pointed at the fake agent playing the cell's provider lanes.

    The agent on the command line is never started by a replay; it is no ACP agent, so only scripted rules fail.
    """
    cells = require_shared("recordings", "acp-cursor")
    no_agent = [sys.executable, "-c", "pass"]
    done = cli("--recordings", str(cells), "--", *ACP, "--", *no_agent)
    recorded = [line for line in done.stdout.splitlines() if line.split()[1].startswith("recorded/")]
    assert len(recorded) == 5 * 8, done.stdout + done.stderr  # acp-cursor records all 8 conformance cells
    assert [line for line in recorded if not line.startswith("PASS ")] == []
    assert "PASS recorded/resume/turn-lifecycle — replay 2 started/2 completed, recording 2/2" in recorded


def test_recorded_run_from_the_cli() -> None:
    cell = require_shared("recordings", "claude-code", "turn-tools")
    done = cli("--fixture", str(DEFAULT_FIXTURE), "--recordings", str(cell), "--", *FAKE)
    assert done.returncode == 0, done.stdout
    assert "PASS recorded/turn-tools/not-empty — " in done.stdout


# -- usage and fixtures -----------------------------------------------------------------


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert cli().returncode == 2
    assert cli("--", "no-such-bridge-command").returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"promptInput": [{"type": "text"}]}))
    done = cli("--fixture", str(bad), "--", *FAKE)
    assert done.returncode == 2
    assert "promptInput/0" in done.stderr
    assert cli("--recordings", str(tmp_path), "--", *FAKE).returncode == 2


async def test_recordings_of_several_providers_are_a_usage_error() -> None:
    root = require_shared("recordings")
    with pytest.raises(UsageError, match="one provider"):
        await run_conformance(FAKE, parse_fixture(QUICK), root)


def test_fixtures_are_validated() -> None:
    assert load_fixture(None).timeouts.wait == 5.0
    with pytest.raises(FixtureError, match="timeouts"):
        parse_fixture({**QUICK, "timeouts": {"waitMs": -1}})
    with pytest.raises(FixtureError, match=r"unexpected|Additional"):
        parse_fixture({**QUICK, "prompt": "typo"})
    with pytest.raises(FixtureError, match="options"):
        parse_fixture({**QUICK, "options": {"permissionMode": "full"}})


def test_client_request_ids_are_the_kits() -> None:
    ids = RequestIds()
    assert [ids() for _ in range(33)][::32] == ["creq_2222222223", "creq_2222222233"]
