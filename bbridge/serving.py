"""The commands that run a daemon: `bbridge serve` (on stdio, a Unix socket, listeners) and `bbridge acp` (an ACP
agent on stdio in front of its own daemon or a running one), what their configuration gives (`bbridge config check`,
`bbridge config explain`, `bbridge tools check`), and the MCP servers they start."""

from __future__ import annotations

import argparse
import gc
import math
import os
import shlex
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import trio

from bbridge import ci, ops
from bbridge.config_file import ConfigError
from bbridge.listen import options as listen_options

if TYPE_CHECKING:
    import anyio.abc

    from bbridge.acp_face.index import Index
    from bbridge.agents.resolve import Agents
    from bbridge.daemon import server
    from bbridge.daemon.config import ConfigReport, ProviderConfig
    from bbridge.daemon.runtime import Daemon
    from bbridge.daemon.usage_config import UsageConfig
    from bbridge.perspectives.room import Perspectives
    from bbridge.seams.telemetry import Tracer
    from bbridge.toolhost.host import ExternalTool, Host
    from bbridge.toolhost.mcp import McpServerConfig, McpServers


def serve(args: argparse.Namespace) -> int:
    from bbridge import logs
    from bbridge.daemon import server
    from bbridge.daemon.config import warn_refused
    from bbridge.daemon.journal import Journal
    from bbridge.daemon.runtime import Daemon
    from bbridge.listen.admission import ListenError
    from bbridge.listen.face import listen_face
    from bbridge.wire.lanes import record_dir_from_env

    if not math.isfinite(args.flush_ms) or args.flush_ms < 0:
        print("bbridge serve: --flush-ms must be a finite number of milliseconds, at least 0", file=sys.stderr)
        return 2
    logs.configure(args.log_level, fmt=args.log_format)
    try:
        redactions = ci.redactions(args)
    except ValueError as exc:
        print(f"bbridge serve: {exc}", file=sys.stderr)
        return 2
    try:
        served = _served(args, client_servers=args.allow_client_mcp_servers)
    except ConfigError as exc:
        print(f"bbridge serve: {exc}", file=sys.stderr)
        return 2
    providers, report, tool_host = served.providers, served.report, served.tool_host
    refused = [*report.refused, *(tool_host.refused if tool_host is not None else [])]
    if refused and args.strict_config:
        for refusal in refused:
            print(f"bbridge serve: refused {refusal.line()}", file=sys.stderr)
        print(f"bbridge serve: --strict-config: {len(refused)} refused, not starting", file=sys.stderr)
        return 2
    warn_refused(report)
    token = server.read_or_make_token(args.token_file) if args.token_file else None
    try:
        listens = listen_options.settings_from(args, token is not None)
    except ListenError as exc:
        print(f"bbridge serve: {exc}", file=sys.stderr)
        return 2
    record_dir = args.record or record_dir_from_env()
    daemon = Daemon(
        providers,
        journal=Journal(args.journal_bound, args.journal),
        record_dir=record_dir,
        record_redactions=redactions if record_dir is not None else (),
        token=token,
        text_delta_flush_ms=args.flush_ms,
        open_extensions=args.open_extensions,
        **served.daemon_options(),
    )
    # Everything made so far (modules, the config, the daemon) lives as long as the process: out of the collector's
    # sight, a full collection while streaming scans only what the threads made, not the imports' objects too (a
    # full collection stalls every delivery while it runs).
    gc.collect()
    gc.freeze()
    # A young-generation collection every 10,000 net allocations, not 700: a streaming read's events and decoded
    # deltas are freed by their counts within the read, and a collection every few reads only moved the live ones
    # up a generation to be scanned again. Cyclic garbage waits at most that many allocations longer.
    gc.set_threshold(10_000, 10, 10)
    faces = [server.socket_face(args.socket)] if args.socket is not None else []
    faces += [listen_face(settings) for settings in listens]
    try:
        trio.run(_serving, daemon, faces, tool_host, served.faces())
    finally:
        if tool_host is not None:
            tool_host.close()
        served.tracer.close()  # the spans not yet exported are sent (bounded)
        if record_dir is not None:
            commands = {k: shlex.join(v.command) for k, v in providers.items()}
            ci.finish_serve(record_dir, commands, redactions, ops.version())
    return 0


async def _serving(
    daemon: Daemon, faces: list[server.Face], tool_host: Host | None, rooms: Sequence[server.Face] = ()
) -> None:
    """The daemon served on its faces (stdio when none) and its rooms' in-process faces, with the MCP servers of
    `[mcp_servers]` started first and their tools hosted beside the declared ones (a server that fails to start is
    refused and logged), stopped after it, as are the servers threads brought."""
    from bbridge.daemon import server
    from bbridge.toolhost.host import warn_refused
    from bbridge.toolhost.mcp import mcp_servers

    configs = tool_host.catalog.servers if tool_host is not None else []
    async with mcp_servers(configs) as served, _hosting(tool_host):
        if tool_host is not None and configs:
            warn_refused(served.refused, tool_host.extend(served.tools, served.refused))
        if faces:
            await server.serve(daemon, [*faces, *rooms])
        else:
            await server.serve_stdio(daemon, rooms)


@asynccontextmanager
async def _hosting(tool_host: Host | None) -> AsyncIterator[None]:
    """The tool host serving threads' own MCP servers, if there is one."""
    if tool_host is None:
        yield
        return
    async with tool_host.serving():
        yield


class Served(NamedTuple):
    """What a daemon of `serve` or `acp` runs, from `--config` and `--tools-dir`."""

    providers: dict[str, ProviderConfig]
    report: ConfigReport  # the file and every refused entry ([[agents]], [skills], [perspectives] too)
    tool_host: Host | None
    agents: Agents | None  # [[agents]] and [skills] (None: no file)
    room: Perspectives | None  # [perspectives] (None: no table)
    tracer: Tracer  # [telemetry]'s (`NO_TRACER` without the table: nothing of OpenTelemetry imported); closed last
    spending: UsageConfig | None = None  # [pricing."MODEL"] and [[budgets]]

    def daemon_options(self) -> dict[str, Any]:
        return {
            "config": self.report,
            "tool_host": self.tool_host,
            "agents": self.agents,
            "services": [self.room] if self.room is not None else [],
            "tracer": self.tracer,
            "spending": self.spending,
        }

    def faces(self) -> list[server.Face]:
        """The in-process faces the configuration needs (the Perspectives room's connection)."""
        return [room_face(self.room)] if self.room is not None else []


def _served(args: argparse.Namespace, *, client_servers: bool) -> Served:
    """What a daemon of `serve` or `acp` runs: `--config`'s providers and report, the tool host (the Perspectives
    tools among its tools), the agent configuration, the Perspectives room, the tracer and the prices and budgets (a
    `ConfigError` when the file, or `--tools-dir`, cannot be used); `client_servers`: a client may bring its thread's
    MCP servers."""
    from bbridge.agents.config import load_agents
    from bbridge.agents.resolve import Agents
    from bbridge.daemon.config import config_path, load_config
    from bbridge.daemon.usage_config import load_usage
    from bbridge.perspectives.room import Perspectives
    from bbridge.perspectives.settings import load_perspectives
    from bbridge.seams.telemetry import NO_TRACER
    from bbridge.telemetry import tracer
    from bbridge.telemetry.settings import load_telemetry

    path = config_path(args.config)
    providers, report = load_config(path)
    spending = load_usage(path)
    report.refused.extend(spending.refused)
    agents = room = None
    traced = NO_TRACER
    if path is not None:
        state = args.journal / "agents" if args.journal is not None else None  # else $XDG_STATE_HOME/bbridge/agents
        agents = Agents(load_agents(path), state_dir=state)
        report.refused.extend(agents.refused())
        telemetry, refused = load_telemetry(path)
        report.refused.extend(refused)
        traced = tracer(telemetry) if telemetry is not None else NO_TRACER  # OpenTelemetry imported only here
        settings, refused = load_perspectives(path)
        report.refused.extend(refused)
        room = Perspectives(settings, traced) if settings is not None else None
    external = room.tools if room is not None else []
    host = _tool_host(path, args.tools_dir, args.journal, client_servers, external)
    return Served(providers, report, host, agents, room, traced, spending)


def _tool_host(
    config: Path | None,
    tools_dir: Path | None,
    journal_dir: Path | None,
    client_servers: bool = False,
    external: Sequence[ExternalTool] = (),
) -> Host | None:
    """The tools `serve` hosts ([tools.NAME], [[tool_rules]], [tool_audit], --tools-dir's bundles and `external`:
    a room's), their refusals and shadowings logged once; None when there is nothing to host or report and no
    client may bring its MCP servers."""
    from bbridge.toolhost.host import load_host, warn_refused

    host = load_host(config, tools_dir, journal_dir, client_servers=client_servers, external=external)
    if not host.offered() and not host.refused and not host.catalog.servers and not client_servers:
        host.close()
        return None
    warn_refused(host.refused, host.shadowed)
    return host


@asynccontextmanager
async def in_process(daemon: Daemon, name: str, queue_bytes: int) -> AsyncIterator[anyio.abc.ByteStream]:
    """A connection to `daemon` in this process: one end of a socket pair served as one more client (`name`), the
    other yielded for a `Client.over`; the client connection ends with the block."""
    import anyio.abc

    from bbridge.daemon import server

    ours, theirs = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(theirs))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.ClientConnection(daemon, stream, stream, name, queue_bytes).run)
        yield await anyio.abc.UNIXSocketStream.from_socket(ours)
        nursery.cancel_scope.cancel()


def room_face(room: Perspectives) -> server.Face:
    """The Perspectives room's face: its connection to the daemon, in process, for as long as the daemon serves."""
    from bbridge.client import Client

    async def face(daemon: Daemon, queue_bytes: int, task_status: trio.TaskStatus[None]) -> None:
        async with (
            in_process(daemon, "perspectives", queue_bytes) as stream,
            Client.over(stream, token=daemon.token, on_request=room.on_request) as client,
        ):
            await room.serve(client, task_status)

    return face


def acp(args: argparse.Namespace) -> int:
    """`bbridge acp`: the agent on stdio, over its own daemon (a face of it, by a socket pair) or a running one."""
    from bbridge import logs
    from bbridge.acp_face.index import Index
    from bbridge.acp_face.settings import read_settings
    from bbridge.daemon.config import config_path
    from bbridge.ops import read_token

    logs.configure(args.log_level, fmt="json")
    remote = args.socket if args.socket is not None else args.url
    if args.socket is not None and args.url is not None:
        print("bbridge acp: give --socket or --url, not both", file=sys.stderr)
        return 2
    if remote is None and (args.token_file is not None or args.ca_file is not None):
        print("bbridge acp: --token-file and --ca-file are for a running daemon (--socket or --url)", file=sys.stderr)
        return 2
    if remote is not None and (args.journal is not None or args.tools_dir is not None):
        print(
            "bbridge acp: --journal and --tools-dir are for the in-process daemon, not --socket/--url", file=sys.stderr
        )
        return 2
    if args.url is not None and (refused := ops.address_refusal(args)) is not None:
        print(f"bbridge acp: {refused}", file=sys.stderr)
        return 2
    try:
        default_provider = read_settings(config_path(args.config)).default_provider
    except ConfigError as exc:
        print(f"bbridge acp: {exc}", file=sys.stderr)
        return 2
    sessions = args.sessions
    if sessions is None and args.journal is not None:
        sessions = args.journal / "acp-sessions.json"
    elif sessions is None and remote is not None:
        state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        sessions = state / "bbridge" / "acp-sessions.json"
    index = Index(sessions)
    if remote is not None:
        token = read_token(args.token_file)
        trio.run(_acp_remote, remote, token, args.ca_file, index, default_provider)
        return 0
    return _acp_in_process(args, index, default_provider)


async def _acp_remote(
    where: Path | str, token: str | None, ca_file: Path | None, index: Index, default: str | None
) -> None:
    from bbridge.acp_face.agent import AcpClient, serve_stdio

    async with AcpClient.connect(where, token=token, ca_file=ca_file) as client:
        await serve_stdio(client, index, default)


def _acp_in_process(args: argparse.Namespace, index: Index, default_provider: str | None) -> int:
    """The daemon in this process, its one client the ACP face on the other end of a socket pair."""

    from bbridge.acp_face.agent import AcpClient, serve_stdio
    from bbridge.daemon.config import warn_refused
    from bbridge.daemon.journal import Journal
    from bbridge.daemon.runtime import Daemon

    try:
        # the editor is this daemon's one client: the MCP servers it names in `session/new` are its own to start
        served = _served(args, client_servers=True)
    except ConfigError as exc:
        print(f"bbridge acp: {exc}", file=sys.stderr)
        return 2
    warn_refused(served.report)
    tool_host = served.tool_host
    daemon = Daemon(served.providers, journal=Journal(args.journal_bound, args.journal), **served.daemon_options())

    async def face(daemon: Daemon, queue_bytes: int, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        async with in_process(daemon, "acp", queue_bytes) as stream, AcpClient.over(stream) as client:
            await serve_stdio(client, index, default_provider)
        daemon.request_shutdown()  # the editor went away: settle and stop the bridges

    try:
        faces: list[server.Face] = [face]
        trio.run(_serving, daemon, faces, tool_host, served.faces())
    finally:
        if tool_host is not None:
            tool_host.close()
        served.tracer.close()
    return 0


def config_check(args: argparse.Namespace) -> int:
    """`bbridge config check`: every section of the file loaded as `serve` would, each refusal printed."""
    from bbridge.agents.config import load_agents
    from bbridge.agents.resolve import Agents
    from bbridge.daemon.config import config_path, load_config
    from bbridge.daemon.usage_config import load_usage
    from bbridge.perspectives.settings import load_perspectives, unconfigured
    from bbridge.telemetry.settings import load_telemetry

    path = config_path(args.config)
    providers, report = load_config(path)
    agents = Agents(load_agents(path))
    perspectives, perspectives_refused = load_perspectives(path)
    telemetry, telemetry_refused = load_telemetry(path)
    spending = load_usage(path)
    refused = [*report.refused, *agents.refused(), *perspectives_refused, *telemetry_refused, *spending.refused]
    names = ", ".join(sorted(providers))
    contributions = [contribution.id for contribution in agents.config.contributions]
    roots = list(agents.config.roots)
    budgets = [budget.name for budget in spending.budgets]
    loaded = "".join(
        f"; {len(items)} {noun}{'s' if len(items) != 1 else ''} ({', '.join(items)})"
        for noun, items in (
            ("agent contribution", contributions),
            ("skill root", roots),
            ("priced model", spending.pricing.models()),
            ("budget", budgets),
        )
        if items
    )
    if perspectives is not None:
        loaded += "; perspectives" + (f" (panel: {', '.join(perspectives.panel)})" if perspectives.panel else "")
        for warning in unconfigured(perspectives, providers):  # a warning: the tool call is where it fails
            print(f"warning {warning}")
    if telemetry is not None:
        loaded += f"; traces to {telemetry.traces_url}"
    if not refused:
        print(f"ok: {len(providers)} providers ({names}){loaded}")
        return 0
    for refusal in refused:
        print(f"refused {refusal.line()}")
    print(f"{len(refused)} refused; {len(providers)} providers would serve ({names}){loaded}")
    return 1


def config_explain(args: argparse.Namespace) -> int:
    """`bbridge config explain`: the `[[agents]]` contributions resolved for one context, as a turn would."""
    from bbridge.agents.config import load_agents
    from bbridge.agents.explain import explain
    from bbridge.agents.resolve import Agents
    from bbridge.daemon.config import config_path
    from bbridge.seams.agent_config import AgentContext

    agents = Agents(load_agents(config_path(args.config)))
    context = AgentContext(
        provider_id=args.provider, cwd=os.path.abspath(args.cwd), thread_id=args.thread, model=args.model
    )
    configuration = agents.resolve(context)
    if args.json:
        print(msgspec.json.encode(configuration).decode())
        return 0
    print(explain(agents, context, configuration), end="")
    for refusal in agents.refused():
        print(f"refused {refusal.line()}")
    return 0


def tools_check(args: argparse.Namespace) -> int:
    from bbridge.daemon.config import config_path
    from bbridge.toolhost.host import load_host
    from bbridge.toolhost.mcp import McpServers

    host = load_host(config_path(args.config), args.tools_dir, None)
    catalog = host.catalog
    for tool in catalog.tools:
        print(f"{tool.name}: {tool.description}")
        print(f"  from {tool.source}; policy {tool.policy}")
        print(
            f"  argv {msgspec.json.encode(tool.command).decode()}"
            + "".join(f"; {{{k}}} = {v}" for k, v in tool.bound.items())
        )
    served = trio.run(_mcp_tools, catalog.servers) if catalog.servers else McpServers([], [])
    for mcp_tool in served.tools:
        print(f"{mcp_tool.name}: {mcp_tool.description}")
        print(f"  from {mcp_tool.source}; policy {mcp_tool.policy}")
    for rule in host.policies.rules:
        conditions = "; ".join(f"{c.text} matches {c.pattern.pattern!r}" for c in rule.when)
        print(f"rule {rule.name}" + (f" when {conditions}" if conditions else ""))
    for shadowing in catalog.shadowed:
        print(f"shadowed {shadowing.name}: {shadowing.shadowed} (kept: {shadowing.kept})")
    for disabled in catalog.disabled:
        print(f"disabled {disabled}")
    refused = host.refused + served.refused
    for refusal in refused:
        print(f"refused {refusal.line()}")
    count = len(catalog.tools) + len(served.tools)
    if not refused:
        print(f"ok: {count} tools")
        return 0
    print(f"{len(refused)} refused; {count} tools would be offered")
    return 1


async def _mcp_tools(servers: list[McpServerConfig]) -> McpServers:
    """Each MCP server started (within its startup_timeout_s), its tools listed, and stopped again."""
    from bbridge.toolhost.mcp import mcp_servers

    async with mcp_servers(servers) as served:
        return served
