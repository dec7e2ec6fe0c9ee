"""The `bbridge` command line."""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import msgspec
import trio

from bbridge import ci, ops, serving, usage_report
from bbridge.bench import report as bench_report
from bbridge.config_file import ConfigError
from bbridge.core.events import encode_lines
from bbridge.listen import options as listen_options
from bbridge.replay import parity
from bbridge.replay.cells import GOLDEN_ENTROPY, replay_cell
from bbridge.wire.interactions import Decision
from bbridge.wire.lanes import RecordingError

if TYPE_CHECKING:
    from bbridge.ops import Where


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bbridge", description="The timeline daemon between an IDE and provider bridges."
    )
    parser.add_argument("--version", action="version", version=ops.version(), help="the version and which core runs")
    commands = parser.add_subparsers(dest="command", required=True)

    replay = commands.add_parser("replay", help="replay a recorded cell and print its events as NDJSON")
    replay.add_argument("cell", type=Path, metavar="CELL_DIR")
    replay.add_argument("--flush-ms", type=float, default=0, help="text coalescing window (0 disables)")
    replay.add_argument("--entropy-prefix", default=GOLDEN_ENTROPY, help="prefix of minted ids")
    replay.add_argument("--clock", choices=("recorded", "fixed"), default="fixed", help="clock: entry ts or 0")
    replay.add_argument("--unstamped", action="store_true", help="leave threadId/providerThreadId unstamped")
    replay.add_argument("--provider", help="provider id (default: the cell's parent folder name)")

    serve = commands.add_parser(
        "serve", help="run the daemon on stdio, or on a Unix socket (--socket) and HTTP/WebSocket (--listen)"
    )
    serve.add_argument("--socket", type=Path, metavar="PATH", help="listen on this Unix socket (mode 0600)")
    serve.add_argument(
        "--config", type=Path, metavar="FILE", help="providers TOML (default: ./bbridge.toml if present)"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="F",
        help="clients must send this token in initialize; F is made (random, mode 0600) when it does not exist",
    )
    serve.add_argument("--journal", type=Path, metavar="DIR", help="keep the per-thread journal durable in DIR")
    serve.add_argument("--journal-bound", type=int, default=10_000, help="events kept in memory per thread")
    serve.add_argument(
        "--record", type=Path, metavar="DIR", help="record bridge traffic (BB_PROVIDER_BRIDGE_RECORD_DIR)"
    )
    ci.add_redact_options(serve)
    serve.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    serve.add_argument(
        "--log-format", choices=("console", "json"), help="stderr logs (default: console on a terminal, else json)"
    )
    serve.add_argument(
        "--flush-ms", type=float, default=100, metavar="MS", help="text coalescing window, 0 disables; default 100"
    )
    serve.add_argument(
        "--open-extensions",
        action="store_true",
        help="accept extension kinds no config declares (for bridge authors)",
    )
    serve.add_argument(
        "--strict-config", action="store_true", help="refuse to start (exit 2) when any config entry is refused"
    )
    serve.add_argument(
        "--tools-dir",
        type=Path,
        metavar="DIR",
        help="directory of plugin bundles (DIR/NAME/plugin.json) to host beside the config's [tools.NAME]",
    )
    serve.add_argument(
        "--allow-client-mcp-servers",
        action="store_true",
        help="start the MCP servers a client brings for its thread (options.tools.mcpServers): runs any command a "
        "client names, so only for trusted clients",
    )
    listen_options.add_arguments(serve)

    acp = commands.add_parser(
        "acp",
        help="an ACP agent on stdio (what an editor launches): its own daemon, or a running one's client",
        description="Speak the Agent Client Protocol (version 1) on stdio to an editor, every session a thread of "
        "a daemon: by default one run in this process (--config, --journal, --tools-dir as serve has them), or a "
        "running daemon's (--socket PATH, or --url with --token-file). stdout carries the protocol only.",
    )
    acp.add_argument("--socket", type=Path, metavar="PATH", help="a running daemon's Unix socket")
    acp.add_argument("--url", metavar="ws://HOST:PORT", help="a running daemon's WebSocket address (serve --listen)")
    acp.add_argument("--token-file", type=Path, metavar="F", help="the running daemon's token (serve --token-file)")
    acp.add_argument("--ca-file", type=Path, metavar="PEM", help="with a wss:// --url: the CA to check it against")
    acp.add_argument(
        "--config", type=Path, metavar="FILE", help="bbridge TOML (default: ./bbridge.toml if present); [acp] too"
    )
    acp.add_argument("--journal", type=Path, metavar="DIR", help="in-process daemon: keep the journal durable in DIR")
    acp.add_argument("--journal-bound", type=int, default=10_000, help="events kept in memory per thread")
    acp.add_argument("--tools-dir", type=Path, metavar="DIR", help="in-process daemon: plugin bundles to host")
    acp.add_argument(
        "--sessions",
        type=Path,
        metavar="FILE",
        help="the sessions index (cwd, provider, title); default: DIR/acp-sessions.json with --journal, "
        "else $XDG_STATE_HOME/bbridge/acp-sessions.json for a running daemon, else in memory",
    )
    acp.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))

    config = commands.add_parser("config", help="the configuration (bbridge.toml): providers and agents")
    config_actions = config.add_subparsers(dest="action", required=True)
    check = config_actions.add_parser(
        "check",
        help="print the refused entries of a bbridge TOML",
        description='Load the TOML\'s providers, [[agents]], [skills.roots.NAME], [perspectives], [pricing."MODEL"] '
        "and [[budgets]] as `bbridge serve` would and print each refused entry (section.key: why), or 'ok: N providers'; a provider that "
        "[perspectives] names but the file does not configure is a warning. Exit status: 0 nothing refused, 1 an "
        "entry refused, 2 the file is unusable.",
    )
    check.add_argument("--config", type=Path, metavar="FILE", help="bbridge TOML (default: ./bbridge.toml if present)")
    explain = config_actions.add_parser(
        "explain",
        help="print the agent configuration ([[agents]]) resolved for a thread's context",
        description="Resolve the TOML's [[agents]] contributions for a context (cwd, provider, model, thread) as "
        "the daemon does before a turn and print each contribution, applied or not and why, and the composed "
        "instructions, tools, skills and environment; --json prints the AgentConfiguration the client API's "
        "agent/configuration answers. Exit status: 0, or 2 when the file is unusable.",
    )
    explain.add_argument("--cwd", required=True, metavar="DIR", help="the thread's working directory")
    explain.add_argument("--provider", required=True, metavar="ID", help="the thread's provider id")
    explain.add_argument("--model", metavar="M", help="the thread's model")
    explain.add_argument("--thread", metavar="ID", help="the thread's id (for scope = { thread = ID })")
    explain.add_argument(
        "--config", type=Path, metavar="FILE", help="bbridge TOML (default: ./bbridge.toml if present)"
    )
    explain.add_argument("--json", action="store_true", help="the AgentConfiguration as JSON")

    tools = commands.add_parser("tools", help="the tools hosted by the daemon ([tools.NAME] and plugin bundles)")
    tools_actions = tools.add_subparsers(dest="action", required=True)
    tools_check = tools_actions.add_parser(
        "check",
        help="print every hosted tool as an agent will see it, or each refusal",
        description="Load the [tools.NAME] tables of the TOML and the plugin bundles of --tools-dir and print each "
        "tool (name, description, source, policy, argv template), each refused entry or bundle and each shadowing. "
        "Exit status: 0 nothing refused, 1 something refused, 2 the file or directory is unusable.",
    )
    tools_check.add_argument(
        "--config", type=Path, metavar="FILE", help="bbridge TOML (default: ./bbridge.toml if present)"
    )
    tools_check.add_argument(
        "--tools-dir", type=Path, metavar="DIR", help="directory of plugin bundles (DIR/NAME/plugin.json)"
    )

    run = commands.add_parser(
        "run",
        help="run one turn against a bridge and print its live timeline",
        description="Run one turn and print its live timeline: with --provider-cmd against a daemon of its own "
        "(spawned on stdio, the bridge its one provider), with --url against a running daemon's --provider.",
    )
    run.add_argument("--provider-cmd", metavar='"CMD ..."', help="the bridge command line (a daemon of its own)")
    run.add_argument("--provider", metavar="ID", help="with --url: the running daemon's provider to use")
    _daemon_address(run, required=False)
    run.add_argument("--prompt", required=True, help="the prompt of the one turn")
    run.add_argument("--cwd", help="working directory for the bridge and the thread")
    run.add_argument("--json", action="store_true", help="NDJSON events instead of the readable timeline")
    run.add_argument(
        "--tools",
        type=Path,
        metavar="FILE",
        help="JSON list of client tools to declare (DynamicTool + optional answer)",
    )
    run.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    run.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set NAME in the bridge's environment (repeatable): the way to give it a BB_* variable, which the "
        "daemon does not pass from its own environment",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=300,
        metavar="SECONDS",
        help="give up on a turn that has not settled after SECONDS (default 300), saying what it waits on",
    )
    run.add_argument(
        "--record",
        type=Path,
        metavar="DIR",
        help="record the session: one cell per thread, DIR/bridge/<cell>/, with a README (the layout parity reads)",
    )
    run.add_argument("--cell", metavar="NAME", help="with --record: name the thread's cell NAME (default: its id)")
    ci.add_redact_options(run)
    run.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when the daemon noted a bridge mistake in the thread (a dropped event, a suspect close)",
    )

    status = commands.add_parser("status", help="what a running daemon is doing (daemon/status)")
    tail = commands.add_parser("tail", help="the live timeline of a running daemon")
    pending = commands.add_parser("pending", help="the requests a running daemon waits on (thread/pending)")
    respond = commands.add_parser(
        "respond",
        help="answer a pending request (interaction/respond)",
        description="Answer a pending request: an approval with a decision (allow_once, allow_for_session, deny), "
        "any request with --json RESULT (the bridge-protocol answer, protocol.md §3.7). Exit status: 0 answered, "
        "1 refused (the reason on stderr), 2 usage error.",
    )
    stop = commands.add_parser("stop", help="stop a thread: interrupt its open turn, or release it (thread/stop)")
    usage = usage_report.add_parser(commands)
    for ops_command in (status, tail, pending, respond, stop, usage):
        _daemon_address(ops_command, required=True)
    status.add_argument("--json", action="store_true", help="the raw answer as one JSON line")
    status.add_argument(
        "--hidden", action="store_true", help="also list hidden threads, the ones a room runs for itself (its runs)"
    )
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C: the live view of every turn in flight",
    )
    tail.add_argument("--thread", metavar="T", help="only this thread, its journal replayed first")
    pending.add_argument("--thread", metavar="T", help="only this thread's requests")
    pending.add_argument("--json", action="store_true", help="the raw answer as one JSON line")
    respond.add_argument("request_id", metavar="REQUEST_ID", help="the request's id (bbridge pending lists them)")
    respond.add_argument("decision", nargs="?", choices=get_args(Decision), help="an approval's decision")
    respond.add_argument("--json", dest="result", metavar="RESULT", help="the answer, as JSON (any request)")
    stop.add_argument("thread", metavar="THREAD", help="the thread to stop (bbridge status lists them)")
    tail.add_argument(
        "--after-seq", type=int, metavar="N", help="replay from seq N+1 (every known thread without --thread)"
    )
    tail.add_argument("--json", action="store_true", help="NDJSON {threadId, seq, event} lines")

    bench = commands.add_parser("bench", help="core, daemon, memory and coalescing figures (BENCHMARKS.md)")
    bench_report.add_arguments(bench)

    schema = commands.add_parser("schema", help="write JSON Schemas of the wire (deltas, handshake, requests, events)")
    schema.add_argument("--out", type=Path, default=Path("schemas"), metavar="DIR", help="output directory")

    conf = commands.add_parser(
        "conformance",
        help="check a bridge against every conformance rule id (protocol.md §7)",
        description="Spawn the bridge and check every conformance rule id of protocol.md §7.3-§7.6. Prints one "
        "line per rule, PASS|FAIL|SKIP <rule-id> — <reason>, then 'N passed, M failed' (SKIP lines are not "
        "counted). Exit status: 0 all passed, 1 any failure, 2 usage error.",
    )
    conf.add_argument(
        "--fixture", type=Path, metavar="FILE", help="scenario fixture (default: conformance/default.json)"
    )
    conf.add_argument("--recordings", type=Path, metavar="DIR", help="also replay recorded cells (one provider's)")
    conf.add_argument("--wait-ms", type=int, metavar="N", help="bound of every scripted wait (fixture default 5000)")
    ci.add_junit_option(conf, "one test case per rule id, the reason in a failure; SKIP as skipped")
    conf.add_argument("bridge", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the bridge command line")

    ci.add_golden_parser(commands)

    par = commands.add_parser("parity", help="byte-parity checks against golden outputs")
    kinds = par.add_subparsers(dest="kind", required=True)
    rec = kinds.add_parser("recordings", help="recorded cells against golden/<provider>/<cell>/")
    rec.add_argument("root", type=Path, metavar="ROOT")
    rec.add_argument("--golden", type=Path, required=True, metavar="GOLDEN_ROOT")
    live = kinds.add_parser("bridge", help="recorded cells replayed through a live bridge against the goldens")
    live.add_argument("cells", type=Path, nargs="+", metavar="CELL_DIR")
    live.add_argument("--provider-cmd", required=True, metavar='"CMD ..."', help="the bridge command line")
    live.add_argument("--golden", type=Path, required=True, metavar="GOLDEN_ROOT")
    live.add_argument("--allowlist", type=Path, metavar="FILE", help="default: conformance/acp-parity-allowlist.json")
    live.add_argument("--dump-dir", type=Path, metavar="DIR", help="write each cell's replayed events and stderr here")
    ci.add_junit_option(live, "one test case per cell, its diff in the failure")
    live.add_argument(
        "--update",
        action="store_true",
        help="rewrite the goldens (raw events, drops, pins) of each cell that would fail on its events, and print "
        "the diff accepted (UPDATED); a cell that stalled still fails",
    )
    cases = kinds.add_parser("cases", help="synthetic differential cases")
    cases.add_argument("files", type=Path, nargs="+", metavar="FILE")
    cases.add_argument("--first-failure", action="store_true", help="print the first differing step in full")
    return parser


def _daemon_address(command: argparse.ArgumentParser, *, required: bool) -> None:
    """A running daemon's address: `--socket PATH` or `--url ws://…|wss://…` (`serve --listen`), and its token."""
    where = command.add_mutually_exclusive_group(required=required)
    if required:  # `run` drives a running daemon by URL only: it spawns its own otherwise
        where.add_argument("--socket", type=Path, metavar="PATH", help="the daemon's Unix socket")
    where.add_argument(
        "--url", metavar="ws://HOST:PORT", help="the daemon's WebSocket address (serve --listen), ws:// or wss://"
    )
    command.add_argument("--token-file", type=Path, metavar="F", help="the daemon's token (serve --token-file)")
    command.add_argument(
        "--ca-file", type=Path, metavar="PEM", help="with a wss:// --url: the CA its certificate is checked against"
    )


def _replay(args: argparse.Namespace) -> int:
    cell: Path = args.cell
    provider = args.provider or cell.resolve().parent.name
    result = replay_cell(
        cell,
        provider,
        flush_ms=args.flush_ms,
        clock=args.clock,
        entropy_prefix=args.entropy_prefix,
        stamped=not args.unstamped,
    )
    sys.stdout.buffer.write(encode_lines(result.events))
    for reason in result.rejected:
        print(f"bbridge: skipped an invalid thread/delta notification: {reason}", file=sys.stderr)
    return 0


def _parity_recordings(args: argparse.Namespace) -> int:
    passed = failed = 0
    for check in parity.check_recordings(args.root, args.golden):
        print(check.line())
        passed, failed = passed + check.ok, failed + (not check.ok)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def _parity_cases(args: argparse.Namespace) -> int:
    passed = failed = 0
    shown = False
    for path in args.files:
        for case in parity.read_cases(path):
            result = parity.run_case(case)
            if result.ok:
                passed += 1
                continue
            failed += 1
            print(f"FAIL {result.case_id} step {result.step}")
            if args.first_failure and not shown:
                shown = True
                print(f"  expected: {result.expected}\n  got:      {result.got}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def _schema(args: argparse.Namespace) -> int:
    from bbridge.wire.export import write_schemas

    for path in write_schemas(args.out):
        print(path)
    return 0


def _run(args: argparse.Namespace) -> int:
    from bbridge import logs
    from bbridge.daemon.config import command_from_string
    from bbridge.ops import read_token
    from bbridge.run import Remote as RunRemote
    from bbridge.run import RunTool, new_thread_id, read_tools, run_once

    logs.configure(args.log_level)
    if (refused := ops.address_refusal(args)) is not None:
        print(f"bbridge run: {refused}", file=sys.stderr)
        return 2
    remote = None
    if args.url is not None:
        if args.provider_cmd is not None or args.provider is None or args.env:
            print("bbridge run: --url drives a running daemon's --provider ID (its config names the bridge's command "
                  "and environment): give --provider, not --provider-cmd or --env", file=sys.stderr)  # fmt: skip
            return 2
        remote = RunRemote(args.url, args.provider, read_token(args.token_file), args.ca_file)
        command = []
    elif args.provider is not None or args.token_file is not None:
        print("bbridge run: --provider and --token-file are for a running daemon (--url)", file=sys.stderr)
        return 2
    elif not (command := command_from_string(args.provider_cmd or "")):
        print("bbridge run: give --provider-cmd (a daemon of its own) or --url (a running daemon)", file=sys.stderr)
        return 2
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        print("bbridge run: --timeout must be a finite number of seconds, more than 0", file=sys.stderr)
        return 2
    tools: list[RunTool] = []
    if args.tools is not None:
        try:
            tools = read_tools(args.tools.read_bytes())
        except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
            print(f"bbridge run: --tools {args.tools}: {exc}", file=sys.stderr)
            return 2
    env: dict[str, str] = {}
    for pair in args.env:
        name, equals, value = pair.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            print(f"bbridge run: --env {pair!r}: expected NAME=VALUE", file=sys.stderr)
            return 2
        env[name] = value
    if (args.record is not None and remote is not None) or (args.cell and args.record is None):
        print("bbridge run: --record records a daemon of its own (--provider-cmd); --cell needs --record",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        redactions = ci.redactions(args)
    except ValueError as exc:
        print(f"bbridge run: {exc}", file=sys.stderr)
        return 2
    thread_id = new_thread_id()
    serve_options: list[str] = []
    if args.record is not None:
        serve_options = ci.record_options(args)
    one_run = functools.partial(
        run_once, env=env, strict=args.strict, remote=remote, thread_id=thread_id, serve_options=serve_options
    )
    status = trio.run(
        one_run, command, args.prompt, args.cwd, args.json, sys.stdout, tools, args.log_level, args.timeout
    )
    if args.record is not None:
        ci.finish_run(args, command, thread_id, redactions, ops.version())
    return status


def _ops(args: argparse.Namespace) -> int:

    if (refused := ops.address_refusal(args)) is not None:
        print(f"bbridge {args.command}: {refused}", file=sys.stderr)
        return 2
    token = ops.read_token(args.token_file)
    where = ops.Where(args.url if args.url is not None else args.socket, args.ca_file)
    if args.command == "status":
        return ops.status_main(where, token, args.json, watch=args.watch, hidden=args.hidden)
    if args.command == "pending":
        return ops.pending_main(where, token, args.thread, args.json)
    if args.command == "stop":
        return ops.stop_main(where, token, args.thread)
    if args.command == "respond":
        return _respond(args, where, token)
    if args.command == "usage":
        return usage_report.main(args, where, token)
    if args.after_seq is not None and args.after_seq < 0:
        print("bbridge tail: --after-seq must be at least 0", file=sys.stderr)
        return 2
    return ops.tail_main(where, token, args.thread, args.after_seq, args.json)


def _respond(args: argparse.Namespace, where: Where, token: str | None) -> int:

    if (args.decision is None) == (args.result is None):
        print("bbridge respond: give a decision (allow_once|allow_for_session|deny) or --json RESULT", file=sys.stderr)
        return 2
    result = None
    if args.result is not None:
        try:
            result = msgspec.json.decode(args.result)
        except msgspec.DecodeError as exc:
            print(f"bbridge respond: --json is not JSON: {exc}", file=sys.stderr)
            return 2
    return ops.respond_main(where, token, args.request_id, args.decision, result)


def _conformance(args: argparse.Namespace) -> int:
    from bbridge import conformance, logs

    logs.configure("warning")
    command = args.bridge[1:] if args.bridge[:1] == ["--"] else args.bridge
    if not command:
        print(
            "bbridge conformance: no bridge command (usage: bbridge conformance [options] -- CMD ARGS...)",
            file=sys.stderr,
        )
        return 2
    if args.wait_ms is not None and args.wait_ms < 1:
        print("bbridge conformance: --wait-ms must be at least 1", file=sys.stderr)
        return 2
    return conformance.main(command, args.fixture, args.recordings, args.wait_ms, junit_path=args.junit)


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit status. A reader that stops reading (`| head`) ends it quietly: 141, as SIGPIPE would."""
    try:
        return _main(argv)
    except BaseException as exc:
        if not _broken_pipe(exc):
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is still buffered goes nowhere
        return BROKEN_PIPE


BROKEN_PIPE = 128 + signal.SIGPIPE


def _broken_pipe(exc: BaseException) -> bool:
    """Only a closed stdout, maybe inside the exception groups of the tasks that were writing."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_broken_pipe(inner) for inner in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return serving.serve(args)
        if args.command == "acp":
            return serving.acp(args)
        if args.command == "run":
            return _run(args)
        if args.command in ("status", "tail", "pending", "respond", "stop", "usage"):
            return _ops(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "conformance":
            return _conformance(args)
        if args.command == "schema":
            return _schema(args)
        if args.command == "bench":
            return bench_report.main(args)
        if args.command == "config":
            return serving.config_explain(args) if args.action == "explain" else serving.config_check(args)
        if args.command == "tools":
            return serving.tools_check(args)
        if args.command == "golden":
            return ci.golden(args)
        if args.kind == "bridge":
            return ci.parity_bridge(args)
        if args.kind == "recordings":
            return _parity_recordings(args)
        return _parity_cases(args)
    except BrokenPipeError:
        raise  # not a usage error: `main` ends quietly
    except (RecordingError, ConfigError, OSError) as exc:
        print(f"bbridge: {exc}", file=sys.stderr)
        return 2
