"""The readable timeline of `bbridge run` and `bbridge tail` (issue 31): a provider error's words and retries, a
text item that arrives whole; `run --timeout` and the drops that fail a run."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from typing import Any

from bbridge.run import Renderer, drop_reasons, waiting_words
from tests.support import FAKE


def error(detail: str | None = None, will_retry: bool | None = None, message: str = "Provider error") -> dict[str, Any]:
    """A `provider/error` as the recorded cells assemble it (golden/*: message, then detail and willRetry)."""
    event: dict[str, Any] = {"type": "provider/error", "scope": {"kind": "turn", "turnId": "t1"}, "message": message}
    if detail is not None:
        event["detail"] = detail
    if will_retry is not None:
        event["willRetry"] = will_retry
    return event


CODEX_RETRIES = [error(f"Reconnecting... {n}/5\nunexpected status 401 Unauthorized", True) for n in range(1, 6)]
CLAUDE_RETRIES = [
    error(f"Claude Code API retry {n}/10 after {500 * n}ms: HTTP 401 authentication_failed", True) for n in (1, 2, 3)
]
DONE = {"type": "turn/completed", "scope": {"kind": "turn", "turnId": "t1"}, "status": "failed"}


def render(events: list[dict[str, Any]], live: bool, lead: str = "") -> str:
    out = io.StringIO()
    view = Renderer(out, live=live)
    for event in events:
        view.render(event, lead)
    view.line(None)
    return out.getvalue()


def test_a_provider_error_shows_its_detail_not_provider_error() -> None:
    events = [
        error("Not logged in · Please run /login", message="Not logged in · Please run /login"),  # claude-code
        error("Not logged in · Please run /login"),
        error("unexpected status 401 Unauthorized", False),  # codex's last
        error(),  # nothing more to say
        error("Name does not resolve", message="Connection failed"),
    ]
    assert render(events, live=False).splitlines() == [
        "  ! error: Not logged in · Please run /login",
        "  ! … the same error 1 more time",
        "  ! error: unexpected status 401 Unauthorized",
        "  ! error: Provider error",
        "  ! error: Connection failed: Name does not resolve",
    ]


def test_retries_are_one_line_and_a_count_when_not_a_terminal() -> None:
    text = render([*CODEX_RETRIES, error("unexpected status 401 Unauthorized", False), *CLAUDE_RETRIES, DONE], False)
    assert text.splitlines() == [
        "  ! error (retry 1/5): unexpected status 401 Unauthorized",
        "  ! … the same error 4 more times, the last retry 5/5",
        "  ! error: unexpected status 401 Unauthorized",
        "  ! error (retry 1/10): HTTP 401 authentication_failed",
        "  ! … the same error 2 more times, the last retry 3/10",
        "■ turn failed",
    ]


def test_retries_rewrite_one_line_on_a_terminal() -> None:
    pi = [error("500: overloaded", True)] * 3  # pi: willRetry, no counter
    text = render([*CODEX_RETRIES, *pi, DONE], live=True, lead="[thr_a] ")
    lines = text.split("\n")
    assert lines[0].split("\r\x1b[K") == [
        f"[thr_a]   ! error (retry {n}/5): unexpected status 401 Unauthorized" for n in range(1, 6)
    ]
    assert lines[1].split("\r\x1b[K") == [
        "[thr_a]   ! error (will retry): 500: overloaded",
        "[thr_a]   ! error (will retry): 500: overloaded [2 times]",
        "[thr_a]   ! error (will retry): 500: overloaded [3 times]",
    ]
    assert lines[2:] == ["[thr_a] ■ turn failed", ""]


def test_a_text_item_that_arrives_whole_shows_its_text_once() -> None:
    scope = {"kind": "turn", "turnId": "t1"}
    whole = {"type": "agentMessage", "id": "i1", "text": "the whole answer"}
    streamed = {"type": "agentMessage", "id": "i2", "text": "streamed"}
    thought = {"type": "reasoning", "id": "i3", "summary": [], "content": ["I should look first."]}
    events = [
        {"type": "item/started", "scope": scope, "item": {**whole, "text": ""}},
        {"type": "item/completed", "scope": scope, "item": whole},
        {"type": "item/agentMessage/delta", "scope": scope, "itemId": "i2", "delta": "streamed"},
        {"type": "item/completed", "scope": scope, "item": streamed},
        {"type": "item/completed", "scope": scope, "item": thought},
    ]
    assert render(events, live=False).splitlines() == [
        "  ◦ agentMessage",
        "    the whole answer",
        "  ✓ agentMessage",
        "    streamed",
        "  ✓ agentMessage",
        "    thinking: I should look first.",
        "  ✓ reasoning",
    ]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bbridge", "run", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_run_gives_up_after_its_timeout_saying_what_the_turn_waits_on() -> None:
    result = run("--provider-cmd", f"{sys.executable} {FAKE} silent-turn", "--prompt", "x", "--timeout", "1.5")
    assert result.returncode == 1
    assert result.stdout.startswith("▶ turn ")
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("bbridge run: failed: ")]
    assert re.fullmatch(
        r"bbridge run: failed: gave up after 1\.5s \(--timeout\): turn \S+ is open and has had no provider traffic"
        r" for [12]s",
        line,
    ), line


def test_run_gives_up_on_a_turn_the_provider_never_starts() -> None:
    result = run("--provider-cmd", f"{sys.executable} {FAKE} never-answer", "--prompt", "x", "--timeout", "1")
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "bbridge run: failed: gave up after 1s (--timeout): the provider accepted the turn but has not started it"
    )


def test_run_refuses_a_timeout_that_is_not_positive() -> None:
    result = run("--provider-cmd", "x", "--prompt", "x", "--timeout", "0")
    assert result.returncode == 2
    assert result.stderr == "bbridge run: --timeout must be a finite number of seconds, more than 0\n"


def test_dropped_deltas_fail_a_completed_turn_with_the_reason() -> None:
    result = run("--provider-cmd", f"{sys.executable} {FAKE} invalid-delta", "--prompt", "x")
    assert "■ turn completed" in result.stdout.splitlines()
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "bbridge run: failed: the daemon dropped what the bridge sent: 2 invalid thread/delta notification(s) were"
        " skipped whole (its warnings above say which and why)"
    )


def test_drop_reasons_and_waiting_words_read_daemon_status() -> None:
    assert drop_reasons({"deltas_in": 9, "grammar_drops": 0}) == []
    assert drop_reasons({"grammar_drops": 1, "failed_notifications": 2}) == [
        "the daemon dropped what the bridge sent: 1 event(s) the protocol grammar refused were dropped; 2 bridge"
        " notification(s) failed in the daemon and were lost (its warnings above say which and why)"
    ]
    waiting = {
        "openTurn": {"turnId": "t9", "ageS": 40.0},
        "sinceBridgeS": 40.0,
        "waitingOn": [{"requestId": "req_1", "kind": "user_question", "ageS": 39.6}],
    }
    assert waiting_words(waiting) == "turn t9 is waiting on a client to answer a user question (req_1, pending 40s)"
    assert waiting_words(None) == "the daemon does not know the thread"
    assert waiting_words({"openTurn": None, "pendingTurnStart": False}) == (
        "no turn is open: the provider never started one"
    )
