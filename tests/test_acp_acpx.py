"""acpx (the pinned headless ACP client, `make acpx`) runs `bbridge acp` as its agent (issue 36), on the echo bridge
behind the in-process daemon: a prompt whose approval acpx grants, a prompt acpx cancels on SIGINT, and every
message `bbridge acp` writes in those sessions validates against the ACP JSON Schema (tests/acp_schema.py). And on
a running daemon's socket: a question an editor cannot show is answered with no answer, the turn goes on, and a
socket client sees the `provider/warning` the answer put on the thread.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from tests.acp_schema import acpx_problems
from tests.live.processes import no_leftovers
from tests.live.runner import acpx_command, offline_env
from tests.support import connect, fake_provider, running

BBRIDGE_ACP = [sys.executable, "-m", "bbridge", "acp", "--config", os.devnull]  # the built-in echo provider only


def said(lines: list[str]) -> str:
    """The agent's answer: its `agent_message_chunk`s' text, in order."""
    text = ""
    for line in lines:
        update = json.loads(line).get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            text += update["content"]["text"]
    return text


def answers(lines: list[str], key: str) -> list[Any]:
    return [m["result"][key] for m in map(json.loads, lines) if key in (m.get("result") or {})]


def test_acpx_prompts_bbridge_acp_grants_its_approval_and_every_message_is_valid_acp(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    argv = acpx_command(BBRIDGE_ACP, tmp_path, "approve:command deltas:all")
    done = subprocess.run(argv, env=offline_env(tmp_path / "home"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    no_leftovers([tmp_path], "bbridge acp or its echo bridge outlived acpx")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert answers(lines, "outcome") == [{"outcome": "selected", "optionId": "allow_once"}]  # --approve-all
    assert said(lines).endswith("echo: approve:command deltas:all")  # allowed: the echo bridge answers
    assert answers(lines, "stopReason") == ["end_turn"]
    kinds = {json.loads(line).get("params", {}).get("update", {}).get("sessionUpdate") for line in lines}
    assert {"tool_call", "tool_call_update", "plan", "agent_thought_chunk", "usage_update"} <= kinds
    problems, checked = acpx_problems(lines)
    assert problems == [] and checked > 40


def test_acpx_cancels_a_held_turn_on_sigint_and_the_prompt_answers_cancelled(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    argv = acpx_command(BBRIDGE_ACP, tmp_path, "hold")
    acpx = subprocess.Popen(argv, env=offline_env(tmp_path / "home"), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert acpx.stdout is not None
        lines = []
        for line in acpx.stdout:  # ends at EOF at the latest: acpx's --timeout bounds it
            lines.append(line)
            if '"agent_message_chunk"' in line:
                break  # the turn streams and holds
        acpx.send_signal(signal.SIGINT)  # acpx sends session/cancel and waits for the prompt's answer
        rest, err = acpx.communicate(timeout=60)
    finally:
        if acpx.returncode is None:
            acpx.kill()
            acpx.wait()
    no_leftovers([tmp_path], "bbridge acp or its echo bridge outlived acpx")
    lines += rest.splitlines()
    assert any(json.loads(line).get("method") == "session/cancel" for line in lines), err[-3000:]
    assert answers(lines, "stopReason") == ["cancelled"]
    problems, checked = acpx_problems(lines)
    assert problems == [] and checked >= 5  # initialize, session/new, the updates, the answer


async def test_a_question_acpx_cannot_show_is_answered_and_a_provider_warning_is_on_the_thread(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (_, socket), connect(socket) as page:
        acp = [*BBRIDGE_ACP[:-2], "--socket", str(socket), "--sessions", str(tmp_path / "sessions.json")]
        with trio.fail_after(120):
            done = await trio.run_process(acpx_command(acp, tmp_path, "Go?"), env=offline_env(tmp_path / "home"),
                                          cwd=tmp_path, capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
        lines = done.stdout.decode().splitlines()
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        [session] = answers(lines, "sessionId")
        await page.wait_for(lambda: bool(page.of(session, "provider/warning")))
    (warning,) = page.of(session, "provider/warning")
    assert "the agent asked “Go?”; acpx cannot show it over ACP" in warning["summary"]
    assert "cannot show it over ACP" in said(lines)  # the editor is told in the session
    assert answers(lines, "stopReason") == ["end_turn"]  # the turn went on with the empty answer
    assert [m for m in map(json.loads, lines) if m.get("method") == "session/request_permission"] == []
    problems, checked = acpx_problems(lines)
    assert problems == [] and checked >= 5
