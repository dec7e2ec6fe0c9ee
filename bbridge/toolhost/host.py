"""The tool host: what `bbridge.seams.tool_host.ToolHost` asks, done for command tools and external ones.

Its tools compose first-wins: `[tools.NAME]` of `bbridge.toml`, then plugin bundles (the catalog), then external
tools (the MCP servers' `NAME__tool`, anything satisfying `ExternalTool`); a later tool of a taken name is
shadowed and reported. After them, a thread's own MCP servers' tools (thread_servers.py), offered to that thread
only, while the host is `serving`. Every call goes through one path: the decision (policy.py), a person's answer when it is
`ask`, the run (runner.py for a command, `invoke` for an external tool), the redaction of its result, and one
audit line (audit.py), written however the call ends, cancelled too. What the line says of the decision and the run
is noted on the call's span too (`HostedCall.span`, a no-op untraced), whose trace context a command gets as
`TRACEPARENT` (runner.py) and an MCP server in its request's `_meta` (mcp.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import structlog
from msgspec import UNSET, UnsetType

from bbridge.config_file import Refusal, read_toml
from bbridge.core import grammar
from bbridge.seams.telemetry import Span
from bbridge.seams.tool_host import HostedCall
from bbridge.toolhost import runner
from bbridge.toolhost.audit import Audit, digest, load_audit, shape
from bbridge.toolhost.catalog import Catalog, Shadowing, load_tools
from bbridge.toolhost.declarations import HostedTool, Policy, Presentation
from bbridge.toolhost.mcp import McpTool
from bbridge.toolhost.policy import Policies, load_rules
from bbridge.toolhost.results import ToolCallResult, failure
from bbridge.toolhost.thread_servers import ThreadServers
from bbridge.wire import protocol

log = structlog.get_logger("bbridge.toolhost")

DEFAULT_GLYPH = "Wrench"  # a presentation that names a label but no icon


class ExternalTool(Protocol):
    """A tool run by something other than a command (an MCP server's): the host decides, audits and redacts its
    calls like a command tool's; it has no argv, so an `ask` shows its arguments."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def schema(self) -> dict[str, Any]: ...

    @property
    def presentation(self) -> Presentation | None: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def source(self) -> str: ...

    async def invoke(self, arguments: dict[str, Any], call: HostedCall) -> ToolCallResult:
        """The call's `ToolCallResult`; cancelled, nothing it started outlives it. `call` is the call as the daemon
        made it (its thread, provider, turn, `cwd`, the caller's `options`, whether it is `hidden`): a room's tool
        acts for the calling thread; `arguments` is its own copy of `call.arguments`."""
        ...


Tool = HostedTool | ExternalTool


class Host:
    """Implements `bbridge.seams.tool_host.ToolHost`."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        policies: Policies | None = None,
        audit: Audit | None = None,
        external: Sequence[ExternalTool] = (),
        refused: Sequence[Refusal] = (),
        environ: Mapping[str, str] | None = None,
        client_servers: bool = False,
    ) -> None:
        self.catalog = catalog
        self.threads = ThreadServers(client_servers)  # threads' own MCP servers: refused unless `client_servers`
        self.policies = policies or Policies()
        self.audit = audit or Audit()
        self.refused = [*catalog.refused, *refused]
        self.shadowed = list(catalog.shadowed)
        self._environ = os.environ if environ is None else environ
        self._tools: dict[str, Tool] = {tool.name: tool for tool in catalog.tools}
        self.extend(external)

    def extend(self, external: Sequence[ExternalTool], refused: Sequence[Refusal] = ()) -> list[Shadowing]:
        """Tools found once the daemon runs (an MCP server's, listed after it started), after every declared one:
        a name already hosted shadows them. Returns the shadowings they add."""
        self.refused.extend(refused)
        added: list[Shadowing] = []
        for tool in external:
            kept = self._tools.get(tool.name)
            if kept is None:
                self._tools[tool.name] = tool
            else:
                added.append(Shadowing(tool.name, kept.source, tool.source))
        self.shadowed.extend(added)
        return added

    def offered(self) -> list[protocol.DynamicTool]:
        return [
            protocol.DynamicTool(
                name=tool.name,
                description=tool.description,
                inputSchema=tool.schema,
                presentation=_presentation(tool.name, tool.presentation),
            )
            for tool in self._tools.values()
        ]

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """While inside, threads' own MCP servers can start (`open_thread`); leaving stops them all."""
        async with self.threads.serving():
            yield

    async def open_thread(self, thread_id: str, brought: list[Any], cwd: str | None) -> list[protocol.DynamicTool]:
        tools = await self.threads.open(thread_id, brought, cwd, self._tools)
        return [protocol.DynamicTool(name=t.name, description=t.description, inputSchema=t.schema) for t in tools]

    async def call(self, call: HostedCall) -> ToolCallResult:
        tool = self._tools.get(call.tool) or self.threads.tool(call.thread_id, call.tool)
        if tool is None:
            return failure(f"{call.tool}: not a tool this daemon hosts (hosted: {', '.join(self._tools) or 'none'})")
        verdict = self.policies.decide(call.thread_id, tool.name, tool.policy, tool.source, call.arguments)
        line: dict[str, Any] = {
            "thread": call.thread_id,
            "provider": call.provider_id,
            "turn": call.turn_id,
            "call": call.call_id,
            "tool": tool.name,
            "source": tool.source,
            "argsSha256": digest(call.arguments),
            "argsShape": shape(call.arguments),
            "decision": verdict.decision,
            "decidedBy": verdict.by,
            "status": "cancelled",
            "exit": None,
            "attempts": 0,
            "bytesOut": 0,
        }
        started = time.monotonic()
        try:
            result = self.audit.redactor.result(await self._decided(call, tool, verdict.decision, verdict.by, line))
        finally:
            line["durationMs"] = round((time.monotonic() - started) * 1000, 3)
            self.audit.record(line)
            _noted(call.span, tool, line)
            log.info(
                "hosted tool call",
                tool=tool.name,
                thread=call.thread_id,
                decision=line["decision"],
                by=line["decidedBy"],
                status=line["status"],
                exit=line["exit"],
            )
        return result

    async def _decided(
        self, call: HostedCall, tool: Tool, decision: Policy, by: str, line: dict[str, Any]
    ) -> ToolCallResult:
        if decision == "ask":
            approval = await call.ask({"hostedTool": _asked(tool, call.arguments)})
            line["decision"], line["decidedBy"] = f"ask: {approval.decision}", approval.by
            if approval.decision == "allow_for_session":
                self.policies.grant(call.thread_id, tool.name)
            elif approval.decision == "deny":
                line["status"] = "denied"
                return failure(f"{tool.name}: the call was declined by {approval.by}; it did not run")
        elif decision == "deny":
            line["status"] = "denied"
            return failure(f"{tool.name}: denied by {by}; the call did not run")
        if isinstance(tool, HostedTool):
            run = await runner.run(tool, call.arguments, call.cwd, self._environ, call.span.carrier())
            line.update(status=run.status, exit=run.exit_status, attempts=run.attempts, bytesOut=run.bytes_out)
            return run.result
        line["attempts"] = 1
        try:
            result = await tool.invoke(dict(call.arguments), call)
        except Exception as exc:  # an external tool's failure is the call's, never the daemon's
            line["status"] = "error"
            message = self.audit.redactor.text(f"{type(exc).__name__}: {exc}")
            log.warning("external tool failed", tool=tool.name, source=tool.source, error=message)
            return failure(f"{tool.name} failed: {message}")
        line["status"] = "ok" if result.get("success") else "error"
        return result

    def forget(self, thread_id: str) -> None:
        self.policies.forget(thread_id)
        self.threads.close(thread_id)

    def report(self) -> dict[str, Any]:
        return {
            "tools": [
                {
                    "name": tool.name,
                    "source": tool.source,
                    "policy": tool.policy,
                    "kind": "command" if isinstance(tool, HostedTool) else "external",
                }
                for tool in self._tools.values()
            ],
            "refused": [{"section": r.section, "key": r.key, "error": r.error} for r in self.refused],
            "shadowed": [{"name": s.name, "kept": s.kept, "shadowed": s.shadowed} for s in self.shadowed],
            "disabled": list(self.catalog.disabled),
            "rules": [rule.name for rule in self.policies.rules],
            "audit": None if self.audit.path is None else str(self.audit.path),
            "clientMcpServers": self.threads.allowed,
            "threads": self.threads.report(),
        }

    def close(self) -> None:
        self.audit.close()


def _noted(span: Span, tool: Tool, line: Mapping[str, Any]) -> None:
    """The call's span says what its audit line does: the tool's kind and source, the decision and who made it, how
    the run ended (its status, a command's exit status and attempts)."""
    if isinstance(tool, McpTool):
        span.set("bbridge.tool.kind", "mcp")
    span.set("bbridge.tool.source", tool.source)
    span.set("bbridge.tool.decision", line["decision"])
    span.set("bbridge.tool.decided_by", line["decidedBy"])
    span.set("bbridge.tool.status", line["status"])
    span.set("bbridge.tool.attempts", line["attempts"])
    if line["exit"] is not None:
        span.set("bbridge.tool.exit_status", line["exit"])


def _asked(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """What a person is shown: the tool, its arguments, and for a command the argv it would run first."""
    details: dict[str, Any] = {"tool": tool.name, "arguments": dict(arguments)}
    if isinstance(tool, HostedTool):
        details["argv"] = tool.argv(arguments)
    else:
        details["source"] = tool.source
    return details


def _presentation(name: str, declared: Presentation | None) -> grammar.Presentation | UnsetType:
    """The timeline's presentation (label and icon both required there); none when none is declared. The
    declared `intent` has no place on the wire yet and is not sent."""
    if declared is None or (declared.label is None and declared.icon is None):
        return UNSET
    label = declared.label
    return grammar.Presentation(
        label=grammar.Label(pending=label.pending if label else name, completed=label.completed if label else name),
        icon=grammar.Icon(glyph=declared.icon.glyph if declared.icon else DEFAULT_GLYPH),
    )


def load_host(
    config: Path | None,
    tools_dir: Path | None,
    journal_dir: Path | None,
    *,
    external: Sequence[ExternalTool] = (),
    environ: Mapping[str, str] | None = None,
    client_servers: bool = False,
) -> Host:
    """The host of `config`'s `[tools.NAME]`, `[[tool_rules]]` and `[tool_audit]`, `tools_dir`'s bundles and
    `external` (and threads' own MCP servers when `client_servers`); raises ConfigError when the file or directory
    cannot be used at all."""
    catalog = load_tools(config, tools_dir)
    raw = read_toml(config) if config is not None else {}
    rules, refused = load_rules(raw["tool_rules"]) if "tool_rules" in raw else ([], [])
    audit, audit_refused = load_audit(raw.get("tool_audit"), journal_dir)
    return Host(
        catalog,
        policies=Policies(rules),
        audit=audit,
        external=external,
        refused=[*refused, *audit_refused],
        environ=environ,
        client_servers=client_servers,
    )


def warn_refused(refused: Sequence[Refusal], shadowed: Sequence[Shadowing]) -> None:
    """Each refusal and shadowing, logged once: the declared tools' when the daemon starts, an MCP server's once
    it has started."""
    for refusal in refused:
        log.warning("hosted tool refused", section=refusal.section, key=refusal.key, error=refusal.error)
    for shadowing in shadowed:
        log.warning("hosted tool shadowed", tool=shadowing.name, kept=shadowing.kept, shadowed=shadowing.shadowed)
