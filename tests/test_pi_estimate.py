"""pi's context usage moved back to the event it follows (`bridges.pi.estimate`, issue 31 item 13): pi answers
`get_session_stats` after it took in a queued steer, and the reference read the usage before. The rule is pi's
`estimateTokens` (compaction.js); the live check against the real pi is in tests/test_pi_live.py."""

from __future__ import annotations

import json
from typing import Any

import trio

from bridges.pi import estimate
from bridges.pi.child import PiChild

STEER = {"role": "user", "content": [{"type": "text", "text": "Then say steered."}], "timestamp": 1}
USAGE = {"tokens": 144, "contextWindow": 128000, "percent": 0.1125}


def test_estimate_follows_pis_rule() -> None:
    assert estimate.estimate_tokens(STEER) == 5  # ⌈17 / 4⌉
    assert estimate.estimate_tokens({"role": "user", "content": "héllo 😀"}) == 2  # 8 UTF-16 units
    image = {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image", "data": "…"}]}
    assert estimate.estimate_tokens(image) == 1201  # ⌈(3 + 4800) / 4⌉
    call = {"type": "toolCall", "id": "c", "name": "bash", "arguments": {"command": "ls"}}
    assistant = {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}, {"type": "thinking", "thinking": "hm"}, call],
    }
    assert estimate.estimate_tokens(assistant) == 6  # 2 + 2 + len("bash") + len('{"command":"ls"}')
    assert estimate.estimate_tokens({"role": "bashExecution", "command": "ls", "output": "a\n"}) == 1
    assert estimate.estimate_tokens({"role": "compactionSummary", "summary": "x" * 9}) == 3
    assert estimate.estimate_tokens({"role": "toolResult", "content": [{"type": "text", "text": "(no output)"}]}) == 3
    assert estimate.estimate_tokens({"role": "other"}) == 0 and estimate.estimate_tokens(None) == 0


def test_a_steer_taken_in_after_the_event_is_taken_back_out() -> None:
    assert estimate.as_of_event(USAGE, [STEER]) == {"tokens": 139, "contextWindow": 128000}
    assert estimate.as_of_event(USAGE, []) is USAGE


def test_what_cannot_be_moved_back_is_kept() -> None:
    answered = {"role": "assistant", "content": [], "stopReason": "stop", "usage": {"totalTokens": 150}}
    assert estimate.as_of_event(USAGE, [STEER, answered]) is USAGE  # a new base: the event's is unknown
    failed = {"role": "assistant", "content": [{"type": "text", "text": "x" * 8}], "stopReason": "error",
              "usage": {"totalTokens": 150}}  # fmt: skip
    assert estimate.as_of_event(USAGE, [failed])["tokens"] == 142  # not a base: estimated like any later message
    after_compaction = {"tokens": None, "contextWindow": 128000, "percent": None}
    assert estimate.as_of_event(after_compaction, [STEER]) is after_compaction
    assert estimate.as_of_event(None, [STEER]) is None


def feed(child: PiChild, lines: list[dict[str, Any]]) -> None:
    """Lines as pi's stdout reader hands them over (no pump reads them: the channel buffers)."""

    async def run() -> None:
        for line in lines:
            await child._line(json.dumps(line).encode())

    trio.run(run)


def test_the_child_keeps_the_ended_messages_ahead_of_the_pump() -> None:
    child = PiChild(["pi"], env={}, cwd="/", thread_id="thr")
    feed(child, [
        {"type": "turn_end", "message": {}},  # 1
        {"type": "turn_start"},  # 2
        {"type": "message_end", "message": STEER},  # 3
        {"type": "message_start", "message": {"role": "assistant"}},  # 4
        {"type": "message_end", "message": {"role": "assistant", "n": 5}},  # 5
    ])  # fmt: skip
    assert child.messages_between(1, 4) == [STEER]
    assert child.messages_between(3, 5) == [{"role": "assistant", "n": 5}]
    assert child.messages_between(5, 5) == []
