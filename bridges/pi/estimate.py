"""pi's context usage as of an event, from a later sample (pi-bridge.md [T3], [T25]; §10.3).

The reference reads `getContextUsage()` in-process while it handles a `turn_end`/`compaction_end`. Over RPC the
bridge asks (`get_session_stats`) after reading the event, and pi answers only once its loop yields: by then it
may have taken in messages it queued, a steer above all (the steer's `message_end` comes before the answer). pi's
usage is the last usable assistant usage plus `estimateTokens` of each later message, so a sample is moved back
to the event by subtracting the estimates of the messages whose `message_end` pi wrote in between. When one of
them is an assistant message with a usable usage, the base itself changed and the sample is kept as pi gave it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bbridge.core import js
from bbridge.core.grammar import utf16_len

IMAGE_CHARS = 4800  # pi's ESTIMATED_IMAGE_CHARS
CONTENT_ROLES = ("user", "custom", "toolResult")
SUMMARY_ROLES = ("branchSummary", "compactionSummary")


def _text(value: Any) -> int:
    return utf16_len(value) if isinstance(value, str) else 0


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return utf16_len(content)
    chars = 0
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            chars += _text(block.get("text"))
        elif kind == "image":
            chars += IMAGE_CHARS
    return chars


def _assistant_chars(content: Any) -> int:
    chars = 0
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            chars += _text(block.get("text"))
        elif kind == "thinking":
            chars += _text(block.get("thinking"))
        elif kind == "toolCall":
            chars += _text(block.get("name")) + utf16_len(js.stringify(block.get("arguments")))
    return chars


def estimate_tokens(message: Any) -> int:
    """pi's `estimateTokens`: ⌈chars / 4⌉, chars in UTF-16 units of what the message holds, 0 for other roles."""
    role = message.get("role") if isinstance(message, dict) else None
    if role in CONTENT_ROLES:
        chars = _content_chars(message.get("content"))
    elif role == "assistant":
        chars = _assistant_chars(message.get("content"))
    elif role == "bashExecution":
        chars = _text(message.get("command")) + _text(message.get("output"))
    elif role in SUMMARY_ROLES:
        chars = _text(message.get("summary"))
    else:
        return 0
    return math.ceil(chars / 4)


def _count(value: Any) -> float | None:
    """A finite JSON number, else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None


def _resets_base(message: Any) -> bool:
    """An assistant message whose usage pi's estimate would start from: not aborted or failed, and
    `calculateContextTokens` (`totalTokens`, else the sum of the four counters) above zero."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return False
    if message.get("stopReason") in ("aborted", "error"):
        return False
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return False
    if _count(usage.get("totalTokens")):
        return True
    parts = [_count(usage.get(name)) for name in ("input", "output", "cacheRead", "cacheWrite")]
    return None not in parts and sum(part for part in parts if part is not None) > 0


def as_of_event(usage: Any, added: Sequence[Any]) -> Any:
    """`usage` (pi's `{tokens, contextWindow, percent}`) without the messages pi `added` after the event; the
    result keeps what [T25] reads, `tokens` and `contextWindow`."""
    if not added or not isinstance(usage, dict) or any(_resets_base(message) for message in added):
        return usage
    tokens = _count(usage.get("tokens"))
    if tokens is None:
        return usage  # null after a compaction: nothing is counted yet
    earlier = max(0, tokens - sum(estimate_tokens(message) for message in added))
    return {"tokens": earlier, "contextWindow": usage.get("contextWindow")}
