"""`thread/fork` as a transcript copy (spec §1.7): the CLI resumes the copy under a new session id.

Claude Code keeps each session as `<config>/projects/<sanitized cwd>/<id>.jsonl`. A fork keeps the source's
conversation entries up to the checkpoint, re-keys them (new session id, new uuids, parents remapped) and marks
where they came from; the bridge then starts the child with `--resume <new id>`.

One departure from spec §1.7: the copy leaves out the CLI's `prompt_snapshot` attachments. The pinned CLI writes one
to the transcript when a session first calls the model (its whole system prompt, `appendSystemPrompt` or
`systemPrompt` included) and, on `--resume`, sends that snapshot instead of the prompt its `initialize` asked for.
A fork is a new session whose construction brings its own instructions (protocol.md §4.4, §4.5); with the snapshot
copied it would keep the source's (tests/live/NOTES.md, "Instructions").
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

KEPT_TYPES = frozenset({"user", "assistant", "attachment", "system", "progress"})
SNAPSHOT = "prompt_snapshot"  # an attachment's type: the system prompt a resume replays
DROPPED_FIELDS = ("teamName", "agentName", "sessionKind", "slug", "sourceToolAssistantUUID")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
NAME_LIMIT = 200


class ForkError(RuntimeError):
    """A fork that cannot be made; the message is the runtime's `-32000` text."""


def config_dir(env: Mapping[str, str]) -> Path:
    configured = env.get("CLAUDE_CONFIG_DIR", "")
    return Path(configured) if configured else Path(env.get("HOME", "~")).expanduser() / ".claude"


def sanitize(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def _source(env: Mapping[str, str], cwd: str, source_id: str) -> Path:
    """The source transcript: the cwd's project directory, or a sibling sharing an over-long name's prefix."""
    projects = config_dir(env) / "projects"
    name = sanitize(os.path.realpath(cwd))
    candidates = [projects / name]
    if len(name) > NAME_LIMIT and projects.is_dir():
        candidates += sorted(p for p in projects.iterdir() if p.name.startswith(name[:NAME_LIMIT]))
    for directory in candidates:
        path = directory / f"{source_id}.jsonl"
        if path.is_file():
            return path
    raise ForkError(f"Session {source_id} not found in project directory for {cwd}")


def _entries(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def _first_prompt(entries: list[dict[str, Any]]) -> str | None:
    for entry in entries:
        message = entry.get("message")
        content = message.get("content") if entry.get("type") == "user" and isinstance(message, dict) else None
        if isinstance(content, str) and content.strip():
            return content.strip().split("\n", 1)[0]
    return None


def _snapshot(entry: dict[str, Any]) -> bool:
    attachment = entry.get("attachment")
    return entry.get("type") == "attachment" and isinstance(attachment, dict) and attachment.get("type") == SNAPSHOT


def fork(env: Mapping[str, str], cwd: str, source_id: str, checkpoint: str | None = None) -> str:
    """Copy the source session (up to `checkpoint`) into a new session file; its id."""
    if not _UUID.match(source_id):
        raise ForkError(f"Invalid sessionId: {source_id}")
    if checkpoint is not None and not _UUID.match(checkpoint):
        raise ForkError(f"Invalid upToMessageId: {checkpoint}")
    path = _source(env, cwd, source_id)
    entries = _entries(path)
    replacements = [e for e in entries if e.get("type") == "content-replacement"]
    relocated = next((e for e in reversed(entries) if e.get("type") == "relocated"), None)
    titles = [
        e["customTitle"] for e in entries if e.get("type") == "custom-title" and isinstance(e.get("customTitle"), str)
    ]
    kept = [
        e
        for e in entries
        if e.get("type") in KEPT_TYPES and isinstance(e.get("uuid"), str) and e.get("isSidechain") is not True
    ]
    if checkpoint is not None:
        cut = next((i for i, e in enumerate(kept) if e["uuid"] == checkpoint), None)
        if cut is None:
            raise ForkError(f"Message {checkpoint} not found in session {source_id}")
        kept = kept[: cut + 1]
    parents = {e["uuid"]: e.get("parentUuid") for e in kept}
    skipped = {e["uuid"] for e in kept if e.get("type") == "progress" or _snapshot(e)}
    kept = [e for e in kept if e["uuid"] not in skipped]
    if not kept:
        raise ForkError(f"Session {source_id} has no messages to fork")
    new_id = str(uuid.uuid4())
    renamed = {e["uuid"]: str(uuid.uuid4()) for e in kept}

    def ancestor(old: Any) -> str | None:
        while isinstance(old, str) and old in skipped:
            old = parents.get(old)
        return renamed.get(old) if isinstance(old, str) else None

    lines = []
    for index, entry in enumerate(kept):
        copy = {k: v for k, v in entry.items() if k not in DROPPED_FIELDS}
        copy["uuid"] = renamed[entry["uuid"]]
        copy["parentUuid"] = ancestor(entry.get("parentUuid"))
        if isinstance(entry.get("logicalParentUuid"), str):
            copy["logicalParentUuid"] = renamed.get(entry["logicalParentUuid"], entry["logicalParentUuid"])
        copy["sessionId"] = new_id
        if index == len(kept) - 1:
            copy["timestamp"] = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        copy["isSidechain"] = False
        copy["forkedFrom"] = {"sessionId": source_id, "messageUuid": entry["uuid"]}
        if entry.get("type") == "system" and entry.get("subtype") == "model_refusal_fallback":
            copy["neutralizedByFork"] = True
        lines.append(copy)
    lines += [{**e, "sessionId": new_id} for e in replacements]
    if relocated is not None:
        lines.append({**relocated, "sessionId": new_id})
    title = titles[-1] if titles else _first_prompt(kept) or "Forked session"
    lines.append({"type": "custom-title", "customTitle": f"{title} (fork)", "sessionId": new_id})
    target = path.with_name(f"{new_id}.jsonl")
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write("".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines))
    return new_id
