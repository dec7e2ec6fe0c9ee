"""`bbridge status`, `tail`, `pending`, `respond` and `stop`: an operator's view of a daemon already running on
a socket (`--socket`) or reached by URL (`--url ws://…|wss://…`, `serve --listen`), and what unblocks an agent
without writing code.

Each is a client of the daemon's API through `bbridge.client` (daemon.md §1, §3): `Client.connect` sends
`initialize` (with the token when the daemon wants one, naming itself `bbridge-cli`), then they ask
`daemon/status` or `thread/pending`, answer with `interaction/respond`, stop with `thread/stop`, or follow the
notifications every client is sent. `tail` prints each thread's events exactly once and in `seq` order: a
journal replay (`thread/events {threadId, afterSeq}`) fills whatever the live notifications did not carry, and
anything seen twice is dropped by `seq`; requests asked and resolved (`interaction/opened`/`resolved`) show
in between. Hidden threads (a room's own, `thread/hidden`) are left out of every listing: `status` shows them only
with `--hidden`, and `tail` follows one only by `--thread`; `stop` finds one by its id.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, TextIO

import msgspec
import trio
from msgspec import UNSET

from bbridge import logs
from bbridge.client import Client, DaemonError, Disconnected, unreachable
from bbridge.core import native
from bbridge.daemon.counters import DAEMON_INFO
from bbridge.run import Renderer
from bbridge.wire import client_api as api
from bbridge.wire import errors
from bbridge.wire.interactions import DECISIONS, NotOffered, approval_answer

_SECTIONS = (
    "daemon",
    "providers",
    "threads",
    "pending",
    "counters",
    "config",
)  # rendered field by field; others generically


class OpsError(Exception):
    """A reason to stop, said in one line (exit status 1)."""


class OpsClient(Client):
    """The command line's client: an answer it gives is named `bbridge-cli` in `interaction/resolved`."""

    client_info: ClassVar[dict[str, str]] = {"name": "bbridge-cli", "version": DAEMON_INFO["version"]}


def read_token(path: Path | None) -> str | None:
    return path.read_text(encoding="utf-8").strip() if path is not None else None


@dataclass(frozen=True)
class Where:
    """Where the daemon is: its Unix socket (a path), or a `ws://`/`wss://` URL (a `str`) with the CA file a
    `wss://` server's certificate is checked against (`--ca-file`; none: the system's)."""

    address: Path | str
    ca_file: Path | None = None

    def __str__(self) -> str:
        return str(self.address)


async def _session(
    where: Where, token: str | None, body: Callable[[Client], Awaitable[None]], ctrl_c_ends: bool = False
) -> None:
    """Connect and initialize, run `body`, close; every failure comes out as one `OpsError`.

    With `ctrl_c_ends`, SIGINT ends `body` as if it had returned (exit 0): a KeyboardInterrupt would leave trio
    inside an exception group.
    """
    failure: str | None = None
    connected = False
    async with trio.open_nursery() as nursery:
        if ctrl_c_ends:
            nursery.start_soon(_cancel_on_ctrl_c, nursery.cancel_scope)
        try:
            async with OpsClient.connect(where.address, token=token, ca_file=where.ca_file) as client:
                connected = True
                await body(client)
        except OSError as exc:
            if connected:
                raise  # not the connection's (the client says a dropped connection with Disconnected)
            failure = unreachable(str(where), exc)
        except ValueError as exc:
            if connected:
                raise
            failure = str(exc)  # a URL the client cannot use, and why
        except Disconnected:
            failure = f"the daemon on {where} closed the connection"
        except OpsError as exc:  # the command's own refusal, said in one line
            failure = str(exc)
        except DaemonError as exc:
            failure = exc.message
            if exc.code == errors.UNAUTHORIZED and not connected:
                given = "the token given" if token is not None else "a client without a token (see --token-file)"
                failure = f"the daemon on {where} refused {given}: {exc.message}"
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise OpsError(failure)  # raised in the nursery it would come out wrapped in an exception group


async def _cancel_on_ctrl_c(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT) as interrupts:
        async for _ in interrupts:
            scope.cancel()


def _run(command: str, main: Callable[[], Awaitable[None]]) -> int:
    logs.configure("warning")  # stdout is the output: logs go to stderr
    try:
        trio.run(main)
    except OpsError as exc:
        print(f"bbridge {command}: {exc}", file=sys.stderr)
        return 1
    return 0


# -- status -------------------------------------------------------------------


CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: each --watch refresh replaces the last


def status_main(
    where: Where,
    token: str | None,
    as_json: bool,
    out: TextIO = sys.stdout,
    watch: float | None = None,
    hidden: bool = False,
) -> int:
    """One `daemon/status`, or with `watch` one every `watch` seconds until Ctrl-C (or the daemon goes away);
    `hidden`: the hidden threads' rows too."""

    async def show(client: Client) -> None:
        status = await client.request("daemon/status", {"includeHidden": True} if hidden else {})
        if as_json:
            out.write(msgspec.json.encode(status).decode() + "\n")  # the daemon's own encoding: its bytes
        else:
            lines = format_status(status)
            out.write((CLEAR if watch is not None else "") + "".join(f"{line}\n" for line in lines))
        out.flush()

    async def ask(client: Client) -> None:
        await show(client)
        while watch is not None:  # Ctrl-C ends the watch: exit 0
            await trio.sleep(watch)
            await show(client)

    async def main() -> None:
        await _session(where, token, ask, ctrl_c_ends=watch is not None)

    return _run("status", main)


def format_status(status: dict[str, Any]) -> list[str]:
    """The `daemon/status` answer as readable lines; sections this version does not know are shown key by key."""
    daemon = status.get("daemon") or {}
    lines = [
        f"daemon: {daemon.get('name', '?')} {daemon.get('version', '?')}, up {_duration(daemon.get('uptimeS'))}, "
        f"{_plural(daemon.get('clients', 0), 'client')} (this one included)"
    ]
    providers = status.get("providers") or []
    lines.append("providers:" if providers else "providers: none")
    width = max((len(p.get("providerId", "")) for p in providers), default=0)
    for provider in providers:
        text = f"  {provider.get('providerId', '?'):<{width}}  {provider.get('state', '?')}"
        if provider.get("reason"):
            text += f": {provider['reason']}"  # why it failed
        if provider.get("pid") is not None:
            text += f", pid {provider['pid']}, up {_duration(provider.get('uptimeS'))}"
            text += f", {_plural(provider.get('threads', 0), 'thread')}"
        lines.append(text)
    threads = status.get("threads") or []
    lines.append(
        f"threads: {len(threads)}, pending requests: {status.get('pending', 0)}" if threads else "threads: none"
    )
    lines.extend(_thread_table(threads))
    lines.extend(_section("counters", status.get("counters")))
    if "config" in status:
        lines.extend(_config(status["config"]))
    for key, value in status.items():
        if key not in _SECTIONS:
            lines.extend(_section(key, value))
    return lines


THREAD_COLUMNS = ("THREAD", "PROVIDER", "TURN", "AGE", "SINCE BRIDGE", "WAITING ON", "CLIENTS", "BRIDGE", "SEQ")


def _thread_table(threads: list[dict[str, Any]]) -> list[str]:
    """One row per thread: its open turn and age, how long the bridge has been quiet, what it waits on."""
    if not threads:
        return []
    rows = [THREAD_COLUMNS]
    for thread in threads:
        turn = thread.get("openTurn") or {}
        waiting = ", ".join(
            f"{w.get('kind', '?').replace('_', ' ')} {_duration(w.get('ageS'))}" for w in thread.get("waitingOn") or []
        )
        clients = thread.get("clients") or {}
        bridge = thread.get("bridge") or {}
        hidden = f" (hidden {thread.get('role', '?')} of {thread.get('runId', '?')})" if thread.get("hidden") else ""
        rows.append(
            (
                str(thread.get("threadId", "?")) + hidden,
                str(thread.get("providerId") or "-"),
                str(turn.get("turnId", "-")),
                _duration(turn["ageS"]) if "ageS" in turn else "-",
                _duration(thread["sinceBridgeS"]) if thread.get("sinceBridgeS") is not None else "-",
                waiting or "-",
                f"owner {clients['owner']}" if clients.get("owner") else "no owner",
                f"{bridge.get('state', '?')} pid {bridge.get('pid')}" if bridge else "-",
                str(thread.get("lastSeq", 0)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(THREAD_COLUMNS))]
    return ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _config(config: Any) -> list[str]:
    """Where the providers came from and each refused entry, one line each."""
    if not isinstance(config, dict):
        return _section("config", config)
    lines = ["config:", f"  path: {_value(config.get('path'))}"]
    refused = config.get("refused") or []
    lines.append(f"  refused: {len(refused) or 'none'}")
    for entry in refused:
        if isinstance(entry, dict):
            lines.append(f"    [{entry.get('section', '?')}] {entry.get('key', '?')}: {entry.get('error', '?')}")
        else:
            lines.append(f"    {_value(entry)}")
    rest = {key: value for key, value in config.items() if key not in ("path", "refused")}
    return lines + _section("config", rest)[1:]


def _section(name: str, value: Any) -> list[str]:
    """Any section: an object key by key, a list item by item, anything else on the heading line."""
    if isinstance(value, dict):
        return [f"{name}:", *(f"  {key}: {_value(item)}" for key, item in value.items())]
    if isinstance(value, list):
        return [f"{name}:" if value else f"{name}: none", *(f"  - {_value(item)}" for item in value)]
    return [f"{name}: {_value(value)}"]


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f}s"
    hours, rest = divmod(whole, 3600)
    return (f"{hours}h" if hours else "") + f"{rest // 60:02d}m{rest % 60:02d}s"


# -- tail ---------------------------------------------------------------------

INTERACTION_NOTES = ("interaction/opened", "interaction/resolved")


def asked(params: dict[str, Any]) -> str:
    """What a pending request asks, in a few words: the approval's subject, the first question, the tool."""
    inner = params.get("params") or {}
    if params.get("method") == "item/tool/call":
        return f"tool {inner.get('tool', '?')}"
    payload = inner.get("payload") or {}
    if payload.get("kind") == "user_question":
        questions = payload.get("questions") or [{}]
        more = f" (+{len(questions) - 1} more)" if len(questions) > 1 else ""
        return f"{questions[0].get('prompt', '?')!r}{more}"
    subject = payload.get("subject") or {}
    kind = subject.get("kind")
    if kind == "command":
        what = f"run {subject.get('command')!r}" + (f" in {subject['cwd']}" if subject.get("cwd") else "")
    elif kind == "file_change":
        what = f"change files in {subject.get('writeScope') or 'the workspace'}"
    elif kind == "permission_grant":
        what = f"grant {subject.get('toolName') or 'a tool'} {_value(subject.get('permissions'))}"
    elif kind == "tool_use":
        argv = (inner.get("hostedTool") or {}).get("argv")  # a tool the daemon hosts: the command it would run
        what = f"use {subject.get('tool')}" + (f" running {_value(argv)}" if argv else "")
    else:
        what = "accept a plan" if kind == "plan" else str(kind)
    return what + (f" ({payload['reason']})" if payload.get("reason") else "")


def answer_words(params: dict[str, Any]) -> str:
    """A resolution's answer in a few words: the decision, the answers given, the tool's success, the error."""
    if "error" in params:
        return f"error {params['error'].get('code')}: {params['error'].get('message')}"
    result = params.get("result")
    if isinstance(result, dict):
        if "decision" in result:
            return str(result["decision"])
        if "success" in result:
            return "tool succeeded" if result["success"] else "tool failed"
        if result.get("kind") == "user_answer":
            return f"answered {_plural(len(result.get('answers') or {}), 'question')}"
    return _value(result)


def interaction_line(method: str, params: dict[str, Any]) -> str:
    """`? approval req_1: run 'ls' …` when asked; `↳ approval req_1 answered by socket-3 (bbridge-cli 0.1.0): deny`
    or `… resolved by the daemon's policy (daemon:timeout): deny` when resolved."""
    head = f"{params.get('kind', '?').replace('_', ' ')} {params.get('requestId')}"
    if method == "interaction/opened":
        hint = "|".join(DECISIONS) if params.get("kind") == "approval" else "--json RESULT"
        return f"  ? {head}: {asked(params)} (bbridge respond {params.get('requestId')} {hint})"
    by = str(params.get("resolvedBy"))
    if by.startswith("daemon:"):
        who = f"resolved by the daemon's policy ({by})"
    else:
        client = params.get("client") or {}
        who = f"answered by {by}" + (f" ({client.get('name')} {client.get('version')})" if client else "")
    return f"  ↳ {head} {who}: {answer_words(params)}"


class Tail:
    """Follows threads over one connection, printing each `seq` once and in order.

    The daemon sends this client every event journaled after it connected, in
    order, so a replay asked after connecting leaves no gap: notifications that
    arrive meanwhile wait in the client's queue (`Client.notifications`) and
    those the replay already held are dropped by `seq`. A thread met live
    without a replay starts at that event. Following every thread, it leaves the
    hidden ones out: those `daemon/status` marks when it starts, and those
    `thread/hidden` announces after.
    """

    def __init__(self, out: TextIO, as_json: bool, thread_id: str | None) -> None:
        self.out = out
        self.as_json = as_json
        self.only = thread_id
        self.view = Renderer(out)
        self.last: dict[str, int] = {}  # thread id -> the last seq printed
        self.asked: set[str] = set()  # the requests shown opened and not yet resolved
        self.hidden: set[str] = set()  # the hidden threads (left out unless followed by `--thread`)

    async def follow(self, client: Client, after_seq: int | None) -> None:
        """Replay first (the one thread, or with `after_seq` every thread the daemon knows), then live."""
        try:
            if self.only is not None:
                await self.replay(client, self.only, after_seq or 0)
            else:
                threads = (await client.status(include_hidden=True)).threads
                self.hidden = {thread["threadId"] for thread in threads if thread.get("hidden")}
                for thread in threads:
                    if after_seq is not None and thread["threadId"] not in self.hidden:
                        await self.replay(client, thread["threadId"], after_seq)
        except Disconnected:
            return  # the daemon went away mid-replay: the end of the tail, like any other close
        try:
            for pending in (await client.pending(self.only)).pending:  # what already waits, before what comes
                if self.follows(pending.threadId):
                    self.show_interaction("interaction/opened", msgspec.to_builtins(pending))
        except Disconnected:
            return
        async for note in client.notifications():  # ends when the daemon closes the connection
            if note.method == "thread/hidden":
                self.hidden.add(str(note.raw.get("threadId")))
                continue
            if note.method in INTERACTION_NOTES:
                if self.follows(note.raw.get("threadId")):
                    self.show_interaction(note.method, note.raw)
                continue
            batch = note.params
            if not isinstance(batch, api.ThreadEventsNotification) or not self.follows(batch.threadId):
                continue
            for entry in batch.events:
                if entry.seq > self.last.setdefault(batch.threadId, entry.seq - 1):
                    self.show(batch.threadId, entry)

    def follows(self, thread_id: str | None) -> bool:
        """The one thread followed (`--thread`), or any but a hidden one."""
        return thread_id == self.only if self.only is not None else thread_id not in self.hidden

    async def replay(self, client: Client, thread_id: str, after: int) -> None:
        self.last[thread_id] = after
        answer = await client.thread_events(thread_id, after)
        if answer.missingThrough is not UNSET:
            print(
                f"bbridge tail: {thread_id}: the journal no longer holds seq {after + 1} "
                f"through {answer.missingThrough}",
                file=sys.stderr,
            )
        for entry in answer.events:
            self.show(thread_id, entry)

    def show_interaction(self, method: str, params: dict[str, Any]) -> None:
        """A request asked (`interaction/opened`, or pending when the tail starts) or resolved, and by whom; one
        opened live while the tail asked what is pending is shown once."""
        request_id = str(params.get("requestId"))
        if method == "interaction/opened":
            if request_id in self.asked:
                return
            self.asked.add(request_id)
        else:
            self.asked.discard(request_id)
        thread_id = params.get("threadId")
        if self.as_json:
            record = {"threadId": thread_id, "method": method, "params": params}
            self.out.write(msgspec.json.encode(record).decode() + "\n")
        else:
            lead = "" if self.only is not None else f"[{thread_id or '-'}] "
            self.view.line(lead + interaction_line(method, params))
        self.out.flush()

    def show(self, thread_id: str, entry: api.Entry) -> None:
        self.last[thread_id] = entry.seq
        if self.as_json:
            record = {"threadId": thread_id, "seq": entry.seq, "event": entry.event}
            self.out.write(msgspec.json.encode(record).decode() + "\n")
        else:
            lead = "" if self.only is not None else f"[{thread_id}] "
            self.view.render(entry.event, lead)
        self.out.flush()


def tail_main(
    where: Where,
    token: str | None,
    thread_id: str | None,
    after_seq: int | None,
    as_json: bool,
    out: TextIO = sys.stdout,
) -> int:
    tail = Tail(out, as_json, thread_id)

    async def main() -> None:
        async def follow(client: Client) -> None:
            await tail.follow(client, after_seq)

        await _session(where, token, follow, ctrl_c_ends=True)

    try:
        return _run("tail", main)
    finally:
        tail.view.line(None)  # end a streamed-text run left open
        out.flush()


# -- pending, respond, stop ---------------------------------------------------


def pending_main(
    where: Where, token: str | None, thread_id: str | None, as_json: bool, out: TextIO = sys.stdout
) -> int:
    """`thread/pending`: one line per open request (or the raw answer), what answers it in the hint."""

    async def show(client: Client) -> None:
        listing = await client.request("thread/pending", {} if thread_id is None else {"threadId": thread_id})
        if as_json:
            out.write(msgspec.json.encode(listing).decode() + "\n")
            return
        pending = listing.get("pending") or []
        if not pending:
            out.write("no pending requests" + (f" in thread {thread_id}" if thread_id else "") + "\n")
        for request in pending:
            line = interaction_line("interaction/opened", request).strip()[2:]
            out.write(f"{request.get('threadId') or '-'}  {_duration(request.get('ageS'))}  {line}\n")

    return _run("pending", lambda: _session(where, token, show))


def respond_main(
    where: Where, token: str | None, request_id: str, decision: str | None, result: Any, out: TextIO = sys.stdout
) -> int:
    """`interaction/respond`: a shorthand decision (approvals only) or a JSON result, then one line saying so."""

    async def answer(client: Client) -> None:
        listing = await client.pending()
        request = next((r for r in msgspec.to_builtins(listing.pending) if r["requestId"] == request_id), None)
        answer = result
        if decision is not None:
            if request is None:  # the daemon says why: resolved already (by whom), or never known
                answer = {"decision": decision}
            elif request["kind"] != "approval":
                raise OpsError(
                    f"{request_id} is a {request['kind'].replace('_', ' ')}, not an approval: answer it with"
                    f" --json RESULT (bbridge pending --json shows what it asks)"
                )
            else:
                payload = (request.get("params") or {}).get("payload") or {}
                try:
                    answer = approval_answer(request_id, payload, decision)
                except NotOffered as exc:
                    raise OpsError(str(exc)) from None
        await client.respond(request_id, answer)
        where = f" in thread {request['threadId']}" if request is not None and request.get("threadId") else ""
        out.write(f"answered {request_id}{where}: {answer_words({'result': answer})}\n")

    return _run("respond", lambda: _session(where, token, answer))


def stop_main(where: Where, token: str | None, thread_id: str, out: TextIO = sys.stdout) -> int:
    """`thread/stop`: an interrupt of the thread's open turn, or a release of an idle thread."""

    async def stop(client: Client) -> None:
        threads = (await client.status(include_hidden=True)).threads  # a hidden thread is stopped by its id too
        thread = next((t for t in threads if t.get("threadId") == thread_id), None)
        if thread is None:
            raise OpsError(f"the daemon on {where} has no thread {thread_id!r} (bbridge status lists its threads)")
        if not thread.get("providerId"):
            raise OpsError(f"thread {thread_id!r} has no provider on this daemon (only its journal): nothing runs")
        turn = (thread.get("openTurn") or {}).get("turnId")
        params = {
            "providerId": thread["providerId"],
            "threadId": thread_id,
            "intent": "interrupt" if turn else "release",
            "activeTurnId": turn,
        }
        result = await client.request("thread/stop", params)
        done = f"interrupted turn {turn}" if turn else "released it (no turn was open)"
        if isinstance(result, dict) and result.get("turnAlreadyEnded"):
            done = f"turn {turn} had already ended (the bridge settled it before the interrupt reached it)"
        out.write(f"stopped {thread_id} ({thread['providerId']}): {done}\n")

    return _run("stop", lambda: _session(where, token, stop))


def version() -> str:
    """What `bbridge --version` and a recording's README say: `bbridge 0.1.0 (core: compiled (mypyc))`, or `... (core: pure (why))`: which core this process runs."""
    try:
        version = metadata.version("bbridge")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"bbridge {version} (core: {native.describe()})"


def address_refusal(args: argparse.Namespace) -> str | None:
    """Why a command's `--url` and `--ca-file` cannot be used as given, or None."""
    from bbridge.client import is_url

    if args.url is not None and not is_url(args.url):
        return f"--url {args.url!r}: expected ws://HOST:PORT or wss://HOST:PORT (serve --listen's address)"
    if args.ca_file is not None and not (args.url or "").startswith("wss://"):
        return "--ca-file is for a wss:// --url (the CA a TLS listener's certificate is checked against)"
    return None
