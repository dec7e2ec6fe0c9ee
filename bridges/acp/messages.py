"""The slice of the Agent Client Protocol (version 1) the bridge reads, over decoded JSON.

ACP objects stay plain JSON values: what the agent sent is what an `unhandled`
diagnostic carries, and unknown keys must survive. These readers validate the
fields the translation uses the way the reference bridge does (a malformed
update is reported, never half-translated) and put tool-call fields in one
canonical order so merged and fresh events read alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bbridge.kit.result_text import ResultText

PROTOCOL_VERSION = 1
CLIENT_INFO = {"name": "bb", "version": "1.0.0"}
CLIENT_CAPABILITIES = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}
TOOL_KINDS = frozenset({"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"})
TOOL_STATUSES = frozenset({"pending", "in_progress", "completed", "failed"})
STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})
PERMISSION_KINDS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})
TOOL_CALL_FIELDS = ("toolCallId", "title", "kind", "status", "content", "locations", "rawInput", "rawOutput")

Json = Any
JsonObject = dict[str, Any]


def text_of(block: Json) -> str | None:
    """The text of a `text` content block; None for any other block."""
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    return None


def optional_strings(value: Json, *names: str, non_blank: bool = False) -> dict[str, str] | None:
    """The named string fields of an object (absent ones skipped); None when it is no object or one is no string.

    With `non_blank`, blank strings read as absent.
    """
    if not isinstance(value, dict):
        return None
    fields: dict[str, str] = {}
    for name in names:
        if name not in value:
            continue
        field = value[name]
        if not isinstance(field, str):
            return None
        if not non_blank or field.strip():
            fields[name] = field
    return fields


def _valid_content_entry(entry: Json) -> bool:
    if not isinstance(entry, dict):
        return False
    kind = entry.get("type")
    if kind == "content":
        block = entry.get("content")
        return isinstance(block, dict) and isinstance(block.get("type"), str)
    if kind == "diff":
        old = entry.get("oldText")
        return (
            isinstance(entry.get("path"), str)
            and isinstance(entry.get("newText"), str)
            and (old is None or isinstance(old, str))
        )
    return kind == "terminal" and isinstance(entry.get("terminalId"), str)


def _is_str(value: Json) -> bool:
    return isinstance(value, str)


def _valid_locations(value: Json) -> bool:
    return isinstance(value, list) and all(isinstance(loc, dict) and isinstance(loc.get("path"), str) for loc in value)


_TOOL_FIELD_CHECKS: dict[str, Callable[[Json], bool]] = {
    "toolCallId": _is_str,
    "title": _is_str,
    "kind": TOOL_KINDS.__contains__,
    "status": TOOL_STATUSES.__contains__,
    "content": lambda value: isinstance(value, list) and all(_valid_content_entry(e) for e in value),
    "locations": _valid_locations,
}


def _valid_tool_fields(event: JsonObject, *, partial: bool) -> bool:
    if not partial and "toolCallId" not in event:
        return False
    return all(check(event[name]) for name, check in _TOOL_FIELD_CHECKS.items() if name in event)


def tool_call_event(update: JsonObject) -> JsonObject | None:
    """A `tool_call` / `tool_call_update` update in canonical key order, or None when it does not validate."""
    if not _valid_tool_fields(update, partial=False):
        return None
    event = {name: update[name] for name in TOOL_CALL_FIELDS if name in update}
    event["sessionUpdate"] = update["sessionUpdate"]
    event.update((k, v) for k, v in update.items() if k not in event)
    return event


def permission_request(params: Json) -> tuple[list[JsonObject], JsonObject | None] | None:
    """A `session/request_permission`'s options (at least one `{optionId, name, kind}`) and tool call (None when
    absent); None when the request does not validate."""
    if not isinstance(params, dict):
        return None
    options, tool_call = params.get("options"), params.get("toolCall")
    if not isinstance(options, list) or not options:
        return None
    for option in options:
        if not (
            isinstance(option, dict)
            and isinstance(option.get("optionId"), str)
            and isinstance(option.get("name"), str)
            and option.get("kind") in PERMISSION_KINDS
        ):
            return None
    if tool_call is not None and not (isinstance(tool_call, dict) and _valid_tool_fields(tool_call, partial=True)):
        return None
    return options, tool_call


def plan_entries(update: JsonObject) -> list[JsonObject] | None:
    entries = update.get("entries")
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            return None
        if "status" in entry and entry["status"] not in ("pending", "in_progress", "completed"):
            return None
    return entries


def non_negative_int(value: Json) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value >= 0 and float(value).is_integer() else None


_DATA_URL = re.compile(r"data:image/[a-z0-9.+-]+(?:;[^,]*)?;base64,[a-z0-9+/_=-]+", re.IGNORECASE)

# A tool result as text (the kit's extractor); ACP's reference skips a block whose `type` is blank.
result_text = ResultText(blank_types=False)


def output_text(event: JsonObject) -> str | None:
    """A tool call's output: its `content` text blocks, else its `rawOutput` as text (inline images elided)."""
    chunks = [
        text
        for entry in event.get("content") or []
        if entry.get("type") == "content" and (text := text_of(entry.get("content")))
    ]
    if chunks:
        return "\n".join(chunks)
    if "rawOutput" not in event:
        return None
    text = _DATA_URL.sub("[image]", result_text(event["rawOutput"])).strip()
    return text or None
