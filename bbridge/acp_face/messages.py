"""The ACP (protocol version 1) messages `bbridge acp` reads, as msgspec Structs, and the prompt's blocks as bb
turn input.

Only what the agent side reads is typed; what it writes is built as plain dicts in the ACP shapes (the SDK's JSON
Schema is the reference). Unknown members are ignored, as ACP's `_meta` extensibility asks.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote, urlsplit

import msgspec

PROTOCOL_VERSION: Final = 1
AGENT_INFO: Final = {"name": "bbridge", "title": "bbridge", "version": "0.1.0"}


class Implementation(msgspec.Struct, kw_only=True):
    name: str
    version: str = ""


class InitializeParams(msgspec.Struct, kw_only=True):
    protocolVersion: int
    clientCapabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    clientInfo: Implementation | None = None


class NewSessionParams(msgspec.Struct, kw_only=True):
    cwd: str
    mcpServers: list[dict[str, Any]] = msgspec.field(default_factory=list)


class LoadSessionParams(msgspec.Struct, kw_only=True):
    sessionId: str
    cwd: str
    mcpServers: list[dict[str, Any]] = msgspec.field(default_factory=list)


class ListSessionsParams(msgspec.Struct, kw_only=True):
    cwd: str | None = None
    cursor: str | None = None


class ContentBlock(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None
    uri: str | None = None
    name: str | None = None
    resource: dict[str, Any] | None = None


class PromptParams(msgspec.Struct, kw_only=True):
    sessionId: str
    prompt: list[ContentBlock]
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")

    def trace(self) -> dict[str, str] | None:
        """The W3C trace context the editor put in `_meta` (ACP's meta propagation: `traceparent`, `tracestate`), for
        the turn's `_meta`: the daemon's span of the turn is then the child of the editor's."""
        meta = self.meta or {}
        parent, state = meta.get("traceparent"), meta.get("tracestate")
        if not isinstance(parent, str):
            return None
        return {"traceparent": parent} | ({"tracestate": state} if isinstance(state, str) else {})


class SessionParams(msgspec.Struct, kw_only=True):
    """`session/cancel`: the session alone."""

    sessionId: str


class SetConfigOptionParams(msgspec.Struct, kw_only=True):
    sessionId: str
    configId: str
    value: str | bool


def agent_capabilities() -> dict[str, Any]:
    """What `initialize` says this agent does: load, list, text and embedded context (no images, no audio)."""
    return {
        "loadSession": True,
        "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": False, "sse": False},
        "sessionCapabilities": {"list": {}},
    }


def turn_input(blocks: list[ContentBlock]) -> list[dict[str, Any]]:
    """The prompt's blocks as bb turn input: text as text, a `file://` resource link as a local file, an embedded
    text resource as text naming its URI; blocks of other kinds are refused by the capabilities and skipped."""
    inputs: list[dict[str, Any]] = []
    for block in blocks:
        if block.type == "text" and block.text:
            inputs.append({"type": "text", "text": block.text, "mentions": []})
        elif block.type == "resource_link" and block.uri:
            path = file_path(block.uri)
            if path is not None:
                inputs.append({"type": "localFile", "path": path, **({"name": block.name} if block.name else {})})
            else:
                inputs.append({"type": "text", "text": block.uri, "mentions": []})
        elif block.type == "resource" and block.resource is not None and isinstance(block.resource.get("text"), str):
            uri = str(block.resource.get("uri") or "")
            inputs.append({"type": "text", "text": f'<context uri="{uri}">\n{block.resource["text"]}\n</context>',
                           "mentions": []})  # fmt: skip
    return inputs


def file_path(uri: str) -> str | None:
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme == "file" and parts.path else None


def thread_servers(servers: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """An editor's `mcpServers` as a construction's `options.tools.mcpServers` (`{name, command: argv, env}`), and
    the names of those left out: only stdio servers can be started by the daemon (an `http`/`sse` entry is the
    editor's own connection to make)."""
    kept: list[dict[str, Any]] = []
    skipped: list[str] = []
    for server in servers:
        name, command = server.get("name"), server.get("command")
        if server.get("type", "stdio") != "stdio" or not isinstance(name, str) or not isinstance(command, str):
            skipped.append(str(name))
            continue
        args = [str(arg) for arg in server.get("args") or []]
        env = {str(v.get("name")): str(v.get("value")) for v in server.get("env") or [] if isinstance(v, dict)}
        kept.append({"name": name, "command": [command, *args], "env": env})
    return kept, skipped
